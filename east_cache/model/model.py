"""EAST (Zhou et al., CVPR 2017) on a VGG16-BN backbone: the network and its initialisation. The backbone's
layers are numbered as torchvision's, so that its ImageNet weights load (east_cache.model.backbone)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MAX_DISTANCE = 512.0         # px; the distance head's range, sigmoid * MAX_DISTANCE (the paper's text scale)
# VGG16-BN: conv widths, "M" = 2x2 max-pool. Laid out as torchvision's `features` (conv, bn, relu per
# width), so a torchvision vgg16_bn state dict loads by its `features.N.*` keys.
VGG16_BN = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
MERGE_WIDTHS = (128, 64, 32)  # channels after merging strides 16, 8, 4 (the paper's g/h branch)
HEAD_WIDTH = 32
HEAD_INIT_STD = 0.01  # small head weights: sigmoids start unsaturated (distance ~256 px, angle ~0)


def vgg16_bn_features() -> nn.Sequential:
    layers, c_in = [], 3
    for v in VGG16_BN:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c_in, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            c_in = v
    return nn.Sequential(*layers)


def conv_bn_relu(c_in: int, c_out: int, k: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True))


def up2(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


class EAST(nn.Module):
    """VGG16-BN features at strides 4/8/16/32, merged upward (U-shape), heads at stride 1/map_scale."""

    def __init__(self, map_scale: float = 0.5):
        super().__init__()
        if map_scale not in (0.5, 0.25):
            raise ValueError(f"map_scale {map_scale} must be 0.5 (stride-2 head) or 0.25 (stride 4)")
        self.features = vgg16_bn_features()
        pools = [i for i, m in enumerate(self.features) if isinstance(m, nn.MaxPool2d)]
        self.taps = pools[1:]  # outputs of pools 2-5: strides 4, 8, 16, 32
        widths = [self.features[i - 2].num_features for i in self.taps]  # BN before each pool: 128, 256, 512, 512
        c_in, merge = widths[-1], []
        for skip, w in zip(reversed(widths[:-1]), MERGE_WIDTHS):
            merge.append(nn.Sequential(conv_bn_relu(c_in + skip, w, 1), conv_bn_relu(w, w, 3)))
            c_in = w
        self.merge = nn.ModuleList(merge)
        self.extra_up = map_scale == 0.5  # one more upsampling takes the stride-4 merge to stride 2
        self.out = conv_bn_relu(c_in, HEAD_WIDTH, 3)
        self.score = nn.Conv2d(HEAD_WIDTH, 1, 1)
        self.dist = nn.Conv2d(HEAD_WIDTH, 4, 1)
        self.angle = nn.Conv2d(HEAD_WIDTH, 1, 1)
        self.apply(init_weights)
        for head in (self.score, self.dist, self.angle):
            nn.init.normal_(head.weight, std=HEAD_INIT_STD)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B,3,S,S) normalised -> score (B,1,m,m) in [0,1] and geo (B,5,m,m): distances to the top, bottom,
        left and right edges (input px), angle (rad); the cache's channel order."""
        taps = []
        for i, layer in enumerate(self.features):
            x = layer(x)
            if i in self.taps:
                taps.append(x)
        y = taps[-1]
        for skip, block in zip(reversed(taps[:-1]), self.merge):
            y = block(torch.cat((up2(y), skip), 1))
        y = self.out(up2(y) if self.extra_up else y)
        dist_px = torch.sigmoid(self.dist(y)) * MAX_DISTANCE
        angle = (torch.sigmoid(self.angle(y)) - 0.5) * math.pi  # (-pi/2, pi/2), the cache's angle range
        return torch.sigmoid(self.score(y)), torch.cat((dist_px, angle), 1)


def init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
