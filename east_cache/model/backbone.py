"""Backbone weights for --backbone-weights: torchvision's ImageNet vgg16_bn (downloaded once into the torch hub
cache, checked against the hash in its file name, as torchvision does), a state-dict file, or none."""
from __future__ import annotations

import pickle
import re
import sys
from pathlib import Path

import torch

from east_cache.model.model import EAST
from east_cache.errors import UsageError

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
