"""A user's own per-crop transform: an albumentations pipeline, a torchvision v2 transform or any callable image ->
image, run where a training crop is made (the loader workers), the crop's words moved with its pixels.

A transform gets the crop as uint8 (S, S, 3) RGB, after the epoch's warp and before the colour jitter and the
normalisation, which stay last, on the device (reader/images.py): so a recipe sees 0..255 pixels, never normalised
ones. It must give back uint8 (S, S, 3); another size, dtype or channel count is refused, naming the transform.

The words follow the pixels. An albumentations pipeline holding a transform that moves pixels (a DualTransform:
Affine, Perspective, Rotate, ElasticTransform, ...) is run with the crop's word corners as keypoints
(KeypointParams "xy", remove_invisible=False), and the crop's targets are made from the moved corners by the
code that makes them from any words (reader/warped.py). Exact for transforms that keep lines straight (affine,
perspective); under the others (elastic, grid distortion) each word's four corners move and the word stays the
quad they make. A legible word that ends up not wholly inside the crop becomes don't-care, as the crop rule makes
a cut word; a quad the transform mirrored (a flip) is put back clockwise, its top edge kept. A pipeline of pixel
transforms only (GaussNoise, CLAHE, ToGray, ...) gets no keypoints and changes no target. A torchvision transform
or a plain callable gets the image alone: its words stay where they were, so it must not move pixels (move
words through albumentations).

Reproducible: before each crop every random source the transform can draw from is seeded from (seed, epoch, image
name, variant) (crop_seed): the pipeline's own generators (albumentations 2's set_random_seed), numpy's and
Python's global ones and, for a torch transform, torch's (inside fork_rng: the process's own stream is put back),
so a crop is the same whichever process or thread makes it, and a resumed run reads the same crops.

A recipe (`east-train --augment RECIPE`) is a file albumentations writes (A.save(pipeline, "aug.yaml",
data_format="yaml"), or JSON), or `file.py:name`, a pipeline object or callable defined in a Python file. Its text
(CropTransform.record) goes into the checkpoint, from which --resume makes it again.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

from east_cache.errors import UsageError, UserError

SEED_SALT = b"east-transform"   # the transform's seeds differ from the crop draw's (crop_draw.CROP_RNG_SALT)
RECIPE_FORMATS = {".yaml": "yaml", ".yml": "yaml", ".json": "json"}   # albumentations' own file formats
INSTALL = 'pip install "east-cache[augment]"'


class TransformError(UserError, RuntimeError):
    """A transform that raised on a crop, or gave back something other than the crop's uint8 (S, S, 3): the
    message names the recipe, the transform and the image."""


class CropWords(NamedTuple):
    """A crop's words: points float32 (P, 2) crop px, offsets int64 (N + 1,), care uint8 (N,) (1 legible)."""
    points: np.ndarray
    offsets: np.ndarray
    care: np.ndarray


def crop_seed(seed: int, epoch: int, name: str, variant: int) -> int:
    """A 32-bit seed of the transform of (image name, variant) at an epoch under a run's seed (numpy's global
    generator takes at most 32 bits)."""
    key = f"{seed}\0{epoch}\0{variant}\0{name}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(key, digest_size=4, person=SEED_SALT).digest(), "little")


class CropTransform:
    """A transform as the reader applies it. transform: an albumentations transform or Compose, a torch module
    (a torchvision v2 transform: it gets a (3, S, S) uint8 tensor), or a callable (S, S, 3) uint8 -> same.
    recipe: how messages name it (a file, `file.py:name`; default its class name); record: what a checkpoint keeps
    to make it again ({"recipe", "format", "text", "name"}), None where it cannot be written down."""

    def __init__(self, transform, recipe: str | None = None, record: dict | None = None):
        self.transform, self.recipe = transform, recipe or type(transform).__name__
        self.kind = kind_of(transform)
        if self.kind is None:
            raise UsageError(f"transform {self.recipe}: not a transform: pass an albumentations pipeline, a "
                             f"torchvision v2 transform, or a callable that takes and returns an (S, S, 3) uint8 image")
        self.moves = self.kind == "albumentations" and moves_pixels(transform)
        self.record = record if record is not None else albumentations_record(transform, self.recipe)
        self._pipeline = keypoint_pipeline(transform) if self.kind == "albumentations" else None

    def __repr__(self) -> str:
        return f"CropTransform({self.recipe})"

    def __getstate__(self):   # a pickled copy (a spawned DataLoader worker) makes it again from its record
        if self.record is None:
            return self.__dict__
        return {"record": self.record}

    def __setstate__(self, state) -> None:
        if "transform" in state:
            self.__dict__.update(state)
        else:
            self.__dict__.update(from_record(state["record"]).__dict__)

    def __call__(self, image: np.ndarray, words: CropWords, seed: int, where: str) -> tuple[np.ndarray, CropWords]:
        """(the transformed crop, its words) for the crop `image` uint8 (S, S, 3) and its words, drawn from `seed`
        (crop_seed); where: the image, as an error names it. Words are the same object unless the transform
        moves pixels."""
        points = words.points
        try:
            with seeded(seed, torch_too=self.kind == "torch"):
                if self._pipeline is not None:
                    self._pipeline.set_random_seed(seed)
                    if self.moves:
                        out = self._pipeline(image=image, keypoints=points.reshape(-1, 2))
                        points = np.asarray(out["keypoints"], np.float32)[:, :2]
                    else:
                        out = self._pipeline(image=image)
                    result = out["image"]
                elif self.kind == "torch":
                    result = torch_image(self.transform(torch_tensor(image)))
                else:
                    result = self.transform(image)
        except Exception as e:   # noqa: BLE001 - any failure of the user's code, named
            raise TransformError(f"--augment {self.recipe}: transform {failing_transform(e, self.transform)} "
                                 f"failed on {where}: {type(e).__name__}: {e}") from e
        result = self.check(result, image.shape, where)
        if not self.moves:
            return result, words
        return result, moved_words(points, words, image.shape[0])

    def check(self, result, shape: tuple, where: str) -> np.ndarray:
        """The transform's result as uint8 (S, S, 3), refused (TransformError) when it is anything else."""
        out = np.asarray(result) if not isinstance(result, np.ndarray) else result
        if out.dtype != np.uint8 or out.shape != shape:
            raise TransformError(f"--augment {self.recipe}: transform {describe(self.transform)} gave {out.dtype} "
                                 f"{tuple(out.shape)} for {where}, where the crop is uint8 {shape}: a crop transform "
                                 f"must keep the size, the 3 RGB channels and uint8 (the normalisation comes after "
                                 f"it, on the device)")
        return out


def kind_of(transform) -> str | None:
    """"albumentations", "torch" (a torch module: torchvision v2's transforms are), "callable", or None."""
    module = type(transform).__module__ or ""
    if module.split(".")[0] == "albumentations":
        import albumentations as A
        if isinstance(transform, (A.BaseCompose, A.BasicTransform)):
            return "albumentations"
    if "torch" in sys.modules:
        import torch
        if isinstance(transform, torch.nn.Module):
            return "torch"
    return "callable" if callable(transform) else None


def moves_pixels(transform) -> bool:
    """Whether an albumentations transform or pipeline holds a transform that moves pixels (a DualTransform: it
    takes keypoints), which the words must follow."""
    import albumentations as A
    if isinstance(transform, A.BaseCompose):
        return any(moves_pixels(t) for t in transform.transforms)
    return isinstance(transform, A.DualTransform)


def keypoint_pipeline(transform):
    """The user's transform inside a Compose that carries the words' corners as keypoints through it ("xy", none
    removed when it leaves the image: a word that leaves the crop becomes don't-care, it does not vanish)."""
    import albumentations as A
    with warnings.catch_warnings():   # a pipeline of pixel transforms: "no transform to process" the keypoints
        warnings.simplefilter("ignore", UserWarning)
        return A.Compose([transform], keypoint_params=A.KeypointParams(format="xy", remove_invisible=False))


def moved_words(points: np.ndarray, words: CropWords, size: int) -> CropWords:
    """The crop's words at their moved corners: quads the transform mirrored put back clockwise (corners 1, 0, 3,
    2: the word's top edge stays its top edge), legible words not wholly inside the crop [0, size]^2 made
    don't-care (as the crop rule makes a word it cuts)."""
    points = points.astype(np.float32).reshape(words.points.shape)
    offsets, care = words.offsets, words.care.copy()
    if len(care):
        counts = np.diff(offsets)
        quads = np.flatnonzero(counts == 4)
        if len(quads):
            idx = offsets[quads][:, None] + np.arange(4)
            before, after = signed_area(words.points[idx]), signed_area(points[idx])
            mirrored = idx[np.sign(before) * np.sign(after) < 0]
            points[mirrored] = points[mirrored[:, [1, 0, 3, 2]]]
        lo = np.minimum.reduceat(points, offsets[:-1], axis=0)
        hi = np.maximum.reduceat(points, offsets[:-1], axis=0)
        inside = np.all((lo >= 0) & (hi <= size) & np.isfinite(lo) & np.isfinite(hi), axis=1)
        care[~inside] = 0
    return CropWords(points, offsets, care)


def signed_area(quads: np.ndarray) -> np.ndarray:
    """(N,) twice the signed area of each quad (N, 4, 2) (shoelace): positive clockwise on screen (y down)."""
    x, y = quads[..., 0], quads[..., 1]
    return (x * np.roll(y, -1, axis=1) - np.roll(x, -1, axis=1) * y).sum(axis=1)


class seeded:
    """Inside, numpy's and Python's global generators (and torch's, torch_too) seeded with `seed`; after, each
    back where it was, so that a reading thread leaves the training process's streams as they were."""

    def __init__(self, seed: int, torch_too: bool = False):
        self.seed, self.torch_too = seed, torch_too

    def __enter__(self):
        self.numpy_state, self.python_state = np.random.get_state(), random.getstate()
        np.random.seed(self.seed)
        random.seed(self.seed)
        if self.torch_too:
            import torch
            self.torch_rng = torch.random.fork_rng(devices=[])
            self.torch_rng.__enter__()
            torch.manual_seed(self.seed)
        return self

    def __exit__(self, *exc) -> None:
        if self.torch_too:
            self.torch_rng.__exit__(*exc)
        np.random.set_state(self.numpy_state)
        random.setstate(self.python_state)


def torch_tensor(image: np.ndarray):
    """(3, S, S) uint8 tensor over the crop (S, S, 3): what torchvision's v2 transforms take as an image."""
    import torch
    return torch.from_numpy(image).permute(2, 0, 1)


def torch_image(result) -> np.ndarray:
    """A torch transform's (3, S, S) result as (S, S, 3); anything else as it is, for check to refuse."""
    import torch
    if isinstance(result, torch.Tensor) and result.ndim == 3:
        return np.ascontiguousarray(result.permute(1, 2, 0).numpy())
    return np.asarray(result)


def describe(transform) -> str:
    """A transform's name as messages give it: its class, or a function's name."""
    return getattr(transform, "__name__", None) or type(transform).__name__


def failing_transform(error: BaseException, transform) -> str:
    """The innermost albumentations transform whose code raised `error` (read from the traceback's frames), else
    the transform's name."""
    name, tb = None, error.__traceback__
    try:
        import albumentations as A
        kinds = (A.BasicTransform,)
    except ImportError:
        kinds = ()
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if kinds and isinstance(owner, kinds):
            name = type(owner).__name__
        tb = tb.tb_next
    return name or describe(transform)


# ---------------------------------------------------------------- recipes

def albumentations_record(transform, recipe: str) -> dict | None:
    """An albumentations pipeline written down as albumentations serialises it (JSON), for a checkpoint; None for
    other transforms and for pipelines holding a transform that cannot be serialised (a Lambda)."""
    if kind_of(transform) != "albumentations":
        return None
    import albumentations as A
    try:
        text = json.dumps(A.to_dict(transform))
    except Exception:   # noqa: BLE001 - NotImplementedError, a value json cannot write: not recorded
        return None
    return {"recipe": recipe, "format": "json", "text": text, "name": None}


def load_recipe(spec) -> CropTransform:
    """The transform a recipe names: PATH.yaml / .yml / .json (albumentations' A.save format) or PATH.py:NAME (an
    object of a Python file). A recipe that does not load is a UsageError naming it and the transform at fault."""
    spec = str(spec)
    path, _, name = spec.rpartition(":") if ".py:" in spec else (spec, "", "")
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--augment {spec}: no such file; pass an albumentations pipeline file (A.save(pipeline, "
                         f"'aug.yaml', data_format='yaml'), or .json) or FILE.py:NAME")
    text = path.read_text(encoding="utf-8")
    fmt = "python" if name else RECIPE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"--augment {spec}: a recipe is a .yaml, .yml or .json file albumentations saved, or "
                         f"FILE.py:NAME naming a pipeline or callable in a Python file")
    return from_record({"recipe": spec, "format": fmt, "text": text, "name": name or None})


def from_record(record: dict) -> CropTransform:
    """A transform made again from its record (load_recipe's, or a checkpoint's)."""
    spec, fmt, text = record["recipe"], record["format"], record["text"]
    if fmt == "python":
        return CropTransform(python_object(spec, text, record["name"]), spec, record)
    return CropTransform(albumentations_pipeline(spec, text, fmt), spec, record)


def python_object(spec: str, text: str, name: str):
    """Object `name` of the Python source `text` (the file `spec` names), run as a module of its own."""
    module_spec = importlib.util.spec_from_loader(f"east_cache_recipe_{abs(hash(spec))}", loader=None)
    module = importlib.util.module_from_spec(module_spec)
    module.__file__ = spec.rpartition(":")[0]
    try:
        exec(compile(text, module.__file__, "exec"), module.__dict__)   # noqa: S102 - the user's own recipe file
    except Exception as e:   # noqa: BLE001 - the user's file failed: named
        raise UsageError(f"--augment {spec}: the file failed to run: {type(e).__name__}: {e}") from e
    if name not in module.__dict__:
        raise UsageError(f"--augment {spec}: the file defines no {name!r}; name a pipeline or callable it defines")
    return module.__dict__[name]


def albumentations_pipeline(spec: str, text: str, fmt: str):
    """The pipeline an albumentations file (its text, `fmt` yaml or json) describes."""
    try:
        import albumentations as A
    except ImportError:
        raise UsageError(f"--augment {spec}: albumentations is not installed: {INSTALL}") from None
    try:
        if fmt == "yaml":
            import yaml
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as e:   # noqa: BLE001 - yaml's and json's errors: named
        raise UsageError(f"--augment {spec}: not a {fmt} file: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("transform"), dict):
        raise UsageError(f"--augment {spec}: not an albumentations pipeline (no 'transform' entry); write one with "
                         f"A.save(pipeline, '{Path(spec).name}', data_format='{fmt}')")
    unknown = unknown_transforms(data["transform"])
    if unknown:
        raise UsageError(f"--augment {spec}: unknown transform {', '.join(unknown)} (albumentations "
                         f"{A.__version__} has no such class); check the name and the albumentations version")
    try:
        return A.from_dict(data)
    except Exception as e:   # noqa: BLE001 - a transform's arguments refused: say which
        raise UsageError(f"--augment {spec}: transform {bad_arguments(data['transform'])} does not load: "
                         f"{' '.join(str(e).split())}") from None


def leaf_transforms(node: dict) -> list[dict]:
    """The transforms of a serialised pipeline, depth first (the compositions' members)."""
    inner = node.get("transforms")
    if isinstance(inner, list):
        return [leaf for t in inner if isinstance(t, dict) for leaf in leaf_transforms(t)]
    return [node]


def unknown_transforms(node: dict) -> list[str]:
    """The class names in a serialised pipeline that albumentations does not know."""
    from albumentations.core.serialization import SERIALIZABLE_REGISTRY, shorten_class_name
    names = []

    def walk(n: dict) -> None:
        name = str(n.get("__class_fullname__"))
        if shorten_class_name(name) not in SERIALIZABLE_REGISTRY:
            names.append(name)
        for t in n.get("transforms", []) if isinstance(n.get("transforms"), list) else []:
            if isinstance(t, dict):
                walk(t)

    walk(node)
    return names


def bad_arguments(node: dict) -> str:
    """The first transform of a serialised pipeline that albumentations refuses to make, by name."""
    import albumentations as A
    for leaf in leaf_transforms(node):
        try:
            A.from_dict({"transform": leaf})
        except Exception:   # noqa: BLE001 - the one we look for
            return str(leaf.get("__class_fullname__"))
    return str(node.get("__class_fullname__"))


def as_transform(transform) -> CropTransform | None:
    """What Loader and CacheDataset take as transform=: None, a recipe (a path or `file.py:name`), a transform
    object, or a CropTransform."""
    if transform is None or isinstance(transform, CropTransform):
        return transform
    if isinstance(transform, (str, Path)):
        return load_recipe(transform)
    return CropTransform(transform)
