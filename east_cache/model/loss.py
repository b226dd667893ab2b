"""The EAST loss, always in float32 whatever the prediction dtype.

Over the pixels of the training mask (roi: 0 on don't-care words and outside the crop):
- score: dice loss 1 - (2 sum(p g) + s) / (sum(p) + sum(g) + s), p the predicted score, g the target (0/1),
  s = DICE_SMOOTH, so that a text-free crop predicted text-free costs 0;
- geometry, on positive pixels only: each holds the distances d = (top, bottom, left, right) from the pixel
  to its word's rotated box edges, in input px. With areas A = (t + b)(l + r) of the prediction and the
  target and the intersection I = (min t + min b)(min l + min r), the IoU loss is -log((I + 1) / (U + 1)),
  U = A_pred + A_gt - I (the +1 keeps empty boxes finite), averaged over positive pixels;
- angle, on positive pixels: 1 - cos(theta_pred - theta_gt), weighted by ANGLE_WEIGHT (the paper's
  lambda_theta), averaged likewise.
The total is dice + IoU + ANGLE_WEIGHT * angle; the parts are returned for logging.
"""
from __future__ import annotations

import torch

ANGLE_WEIGHT = 10.0          # weight of the angle loss against the IoU loss, as in the paper (lambda_theta)
# px of score added to the dice numerator and denominator (Laplace smoothing): a text-free batch predicted
# text-free costs 0, not 1, and one with false positives still costs > 0 with a gradient pushing them down.
# Negligible next to the hundreds of positive px of a batch with words.
DICE_SMOOTH = 1.0
LOSS_KEYS = ("loss", "cls", "iou", "angle")


def east_loss(score, geo, gt_score, gt_geo, roi) -> dict[str, torch.Tensor]:
    """Dice + IoU + ANGLE_WEIGHT * (1 - cos) loss, in float32 whatever the prediction dtype.

    A 512 px box has an area of 1e6, past float16's 65504: the common baseline computes it under
    autocast and returns inf/NaN. Here everything is cast to float32 first.
    """
    p, d, theta = score.float(), geo[:, :4].float(), geo[:, 4:].float()
    roi = roi.float()
    pos = (gt_score > 0).float() * roi
    cls = 1 - (2 * (p * pos).sum() + DICE_SMOOTH) / ((p * roi).sum() + pos.sum() + DICE_SMOOTH)
    keep = pos > 0  # targets elsewhere are irrelevant; zeroing them keeps every map finite
    dg = torch.where(keep, gt_geo[:, :4].float(), 0.0)
    tg = torch.where(keep, gt_geo[:, 4:].float(), 0.0)
    area_p = (d[:, 0:1] + d[:, 1:2]) * (d[:, 2:3] + d[:, 3:4])
    area_g = (dg[:, 0:1] + dg[:, 1:2]) * (dg[:, 2:3] + dg[:, 3:4])
    h_i = torch.minimum(d[:, 0:1], dg[:, 0:1]) + torch.minimum(d[:, 1:2], dg[:, 1:2])
    w_i = torch.minimum(d[:, 2:3], dg[:, 2:3]) + torch.minimum(d[:, 3:4], dg[:, 3:4])
    inter = h_i * w_i
    iou_map = torch.log1p(area_p + area_g - inter) - torch.log1p(inter)  # -log((I+1)/(U+1))
    angle_map = 1 - torch.cos(theta - tg)
    n = pos.sum().clamp(min=1)  # no positives: the sums below are 0 and keep their graph
    iou = (iou_map * pos).sum() / n
    angle = (angle_map * pos).sum() / n
    return {"loss": cls + iou + ANGLE_WEIGHT * angle, "cls": cls, "iou": iou, "angle": angle}

