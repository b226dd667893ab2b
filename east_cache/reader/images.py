"""A batch's images as a network's input, made on the device: uint8 crops to normalised float32, with per-sample
colour jitter (brightness, contrast, saturation, hue) computed there rather than in the loader.

Two normalisations (NORMALIZATIONS): "imagenet", (x / 255 - mean) / std per channel with ImageNet's mean and std,
what this project's EAST (a VGG16-BN backbone trained on ImageNet) takes; "baseline", (x / 255 - 0.5) / 0.5, what
the BoostCamp EAST baseline's dataset hands its model. None leaves the uint8 values.
"""
from __future__ import annotations

import functools
import math

import torch

from east_cache.bounds import Bound

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LUMA = (0.299, 0.587, 0.114)  # ITU-R 601 grey, as torchvision's rgb_to_grayscale
RGB_TO_YIQ = (LUMA, (0.596, -0.274, -0.322), (0.211, -0.523, 0.312))


@functools.lru_cache
def colour_constants(device: torch.device) -> dict[str, torch.Tensor]:
    """Colour constants, copied to the device once: a host-to-device copy per step would stall the stream."""
    yiq = torch.tensor(RGB_TO_YIQ, dtype=torch.float64)
    c = {"mean": torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), "std": torch.tensor(IMAGENET_STD).view(1, 3, 1, 1),
         "luma": torch.tensor(LUMA).view(1, 3, 1, 1), "yiq": yiq.float(), "rgb": torch.linalg.inv(yiq).float()}
    return {k: v.to(device) for k, v in c.items()}


NORMALIZATIONS = ("imagenet", "baseline")
BASELINE_MEAN, BASELINE_STD = 0.5, 0.5   # the baseline's Normalize(mean=(0.5,) * 3, std=(0.5,) * 3)
# color_jitter's strengths: factors U[1-s, 1+s] reach 0 at s = 1, and the hue's U[-s/2, s/2] turns all of them
JITTER = Bound(integer=False, least=0, most=1, note="0: off")


# the colour jitter a training loader applies unless told otherwise: the strength at which color_jitter matches the
# BoostCamp baseline's ColorJitter(0.5, 0.5, 0.5, 0.25) (brightness, contrast, saturation x U[0.5, 1.5], hue
# U[-0.25, 0.25] turns)
BASELINE_JITTER = 0.5


def prepare_images(image: torch.Tensor, jitter: float, normalize: str = "imagenet") -> torch.Tensor:
    """uint8 (B,3,S,S) RGB -> jittered (when jitter > 0), normalised float32 (NORMALIZATIONS), channels_last."""
    x = image.float().div_(255)
    if jitter > 0:
        x = color_jitter(x, jitter)
    if normalize == "baseline":
        x = (x - BASELINE_MEAN) / BASELINE_STD
    elif normalize == "imagenet":
        c = colour_constants(x.device)
        x = (x - c["mean"]) / c["std"]
    else:
        raise ValueError(f"normalize {normalize!r} is not one of {', '.join(NORMALIZATIONS)}")
    return x.contiguous(memory_format=torch.channels_last)


def grey(x: torch.Tensor) -> torch.Tensor:
    return (x * colour_constants(x.device)["luma"]).sum(1, keepdim=True)


def color_jitter(x: torch.Tensor, s: float) -> torch.Tensor:
    """Per-sample brightness, contrast, saturation in U[1-s, 1+s] and hue in U[-s/2, s/2] turns,
    the baseline's ColorJitter(0.5, 0.5, 0.5, 0.25) at s = 0.5. x: float (B,3,H,W) in [0,1]."""
    def factor():
        return (1 + (torch.rand(x.shape[0], 1, 1, 1, device=x.device) * 2 - 1) * s).clamp(min=0)

    x = (x * factor()).clamp(0, 1)
    m = grey(x).mean((2, 3), keepdim=True)
    x = ((x - m) * factor() + m).clamp(0, 1)
    g = grey(x)
    x = ((x - g) * factor() + g).clamp(0, 1)
    return hue_rotate(x, (torch.rand(x.shape[0], device=x.device) * 2 - 1) * (s / 2) * 2 * math.pi)


def hue_rotate(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate the chroma plane of YIQ by `angle` (rad, per sample): one 3x3 matrix per image, close to an
    HSV hue shift without the per-pixel branches of an HSV round trip."""
    k = colour_constants(x.device)
    c, s = torch.cos(angle), torch.sin(angle)
    rot = torch.zeros(x.shape[0], 3, 3, device=x.device)
    rot[:, 0, 0] = 1
    rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = c, -s, s, c
    m = k["rgb"] @ rot @ k["yiq"]
    return torch.einsum("bij,bjhw->bihw", m, x).clamp(0, 1)

