"""EAST (Zhou et al., CVPR 2017) on a VGG16-BN backbone: the network and its initialisation, and where its backbone
weights come from (--backbone-weights). Its input is ImageNet-normalised float32 (east_cache/reader/images.py
makes it from the cache's uint8 crops on the device, with per-sample colour jitter in training). The backbone's layers are numbered as
torchvision's, so that torchvision's ImageNet vgg16_bn weights load by their keys."""
from __future__ import annotations

import math
import pickle
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from east_cache.errors import UsageError

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


# ---------------------------------------------------------------- backbone weights

# torchvision's IMAGENET1K_V1 weights of vgg16_bn; the 8 hex digits in the name start the file's sha256
IMAGENET_URL = "https://download.pytorch.org/models/vgg16_bn-6c64b313.pth"
HASH_IN_NAME = re.compile(r"-([a-f0-9]{8,})\.")  # the hash prefix torchvision puts in its file names
BACKBONE_HINT = ("--backbone-weights takes imagenet, random, or a torchvision vgg16_bn state dict, e.g. "
                 "torch.save(torchvision.models.vgg16_bn(weights='IMAGENET1K_V1').state_dict(), 'vgg16_bn.pth')")


def hub_file(url: str) -> Path:
    """Where the downloaded weights live: TORCH_HOME's hub cache, as torch.hub.load_state_dict_from_url puts them."""
    return Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]


def fetch_imagenet(say) -> Path:
    """The ImageNet weights file, downloaded first if the hub cache does not hold it yet."""
    url = IMAGENET_URL
    dst = hub_file(url)
    if dst.is_file():
        return dst
    place = (f"download it elsewhere and put it at {dst} (TORCH_HOME moves that folder), or pass "
             f"--backbone-weights FILE, or --backbone-weights random to start from random weights")
    match = HASH_IN_NAME.search(dst.name)
    say(f"downloading the ImageNet vgg16_bn weights (528 MB, once) to {dst}")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        torch.hub.download_url_to_file(url, str(dst), hash_prefix=match[1] if match else None,
                                       progress=sys.stderr.isatty())
    except OSError as e:  # urllib.error.URLError included: no network, no such host, HTTP errors
        reason = getattr(e, "reason", None) or e
        raise UsageError(f"--backbone-weights imagenet: cannot download {url} ({reason}). Without a network, "
                         f"{place}") from None
    except RuntimeError as e:  # download_url_to_file's hash check; it leaves no file behind
        raise UsageError(f"--backbone-weights imagenet: the download of {url} was corrupt ({e}) and is not kept; "
                         f"run again, or {place}") from None
    return dst


def check_backbone_file(path: Path) -> None:
    if not path.is_file():
        raise UsageError(f"{path}: no such file; {BACKBONE_HINT}")


def load_backbone(model: EAST, path: Path) -> None:
    """Load the `features.*` part of a torchvision-format VGG16-BN state dict (the classifier is ignored).
    Anything else raises a UsageError that names the file and says what it must hold."""
    check_backbone_file(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # weights_only's refusal is a page of advice on trusting the source
        raise UsageError(f"{path}: holds more than tensors (a whole model saved with torch.save(model)?) or is "
                         f"not a torch file; {BACKBONE_HINT}") from None
    except Exception as e:  # noqa: BLE001  truncated, not a zip: unreadable alike
        raise UsageError(f"{path}: cannot be read as a state dict ({type(e).__name__}: {str(e)[:200]}); "
                         f"{BACKBONE_HINT}") from None
    feats = ({k.removeprefix("features."): v for k, v in state.items() if k.startswith("features.")}
             if isinstance(state, dict) else {})
    if not feats:
        raise UsageError(f"{path}: no `features.N.*` keys; {BACKBONE_HINT}")
    try:
        model.features.load_state_dict(feats)
    except RuntimeError as e:  # other keys or shapes: plain vgg16 (no BN) numbers its layers differently
        raise UsageError(f"{path}: its `features` do not fit VGG16-BN ({str(e)[:300]}); {BACKBONE_HINT}") from None


def init_backbone(model: EAST, spec: str, say) -> str:
    """--backbone-weights applied to a new model; returns what it started from, for the run's first lines."""
    if spec == "random":
        return "random initialisation"
    path = fetch_imagenet(say) if spec == "imagenet" else Path(spec)
    load_backbone(model, path)
    return f"ImageNet vgg16_bn ({path})" if spec == "imagenet" else f"{path}"
