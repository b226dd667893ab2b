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
name, variant) (crop_seed): the pipeline's own generators, numpy's and Python's global ones and, for a torch
transform, torch's (inside fork_rng: the process's own stream is put back), so a crop is the same whichever process
or thread makes it, and a resumed run reads the same crops. Each transform of a pipeline draws from generators of
its own, seeded from the crop's seed and its place in the pipeline (seed_pipeline): albumentations' own
set_random_seed gives every transform the same seed, so that two transforms of the same probability would fire on
the same crops, never apart.

A recipe (`east-train --augment RECIPE`: a file albumentations writes, or `file.py:name`) is read by
east_cache/reader/recipe.py; its text (CropTransform.record) goes into the checkpoint, from which --resume makes it
again.
"""
from __future__ import annotations

import hashlib
import os
import random
import sys
import threading
import warnings
from typing import NamedTuple

import numpy as np

from east_cache.errors import UsageError, UserError
from east_cache.sample.geometry import signed_polygon_area

SEED_SALT = b"east-transform"   # the transform's seeds differ from the crop draw's (crop_draw.CROP_RNG_SALT)


class TransformError(UserError, RuntimeError):
    """A transform that raised on a crop, or gave back something other than the crop's uint8 (S, S, 3): the
    message names the recipe, the transform and the image."""


class CropWords(NamedTuple):
    """A crop's words: points float32 (P, 2) crop px, offsets int64 (N + 1,), care uint8 (N,) (1 legible)."""
    points: np.ndarray
    offsets: np.ndarray
    care: np.ndarray


def crop_seed(seed: int, epoch: int, name: str, variant: int, copy: int = 0) -> int:
    """A 32-bit seed of the transform of (image name, variant) at an epoch under a run's seed (numpy's global
    generator takes at most 32 bits); copy k >= 1, an image's extra item of the epoch (crop_draw.crop_rng's)."""
    key = (f"{seed}\0{epoch}\0{variant}\0{name}" + (f"\0{copy}" if copy else "")).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(key, digest_size=4, person=SEED_SALT).digest(), "little")


class CropTransform:
    """A transform as the reader applies it. transform: an albumentations transform or Compose, a torch module
    (a torchvision v2 transform: it gets a (3, S, S) uint8 tensor), or a callable (S, S, 3) uint8 -> same.
    recipe: how messages name it (a file, `file.py:name`; default its class name); record: what a checkpoint keeps
    to make it again ({"recipe", "format", "text", "name"}: reader/recipe.py), None where there is none; label: where
    an error says it came from ("--augment aug.yaml"; default "transform=NAME")."""

    def __init__(self, transform, recipe: str | None = None, record: dict | None = None, label: str | None = None):
        self.transform, self.recipe = transform, recipe or type(transform).__name__
        self.label = label or f"transform={self.recipe}"   # how errors name where it came from: --augment FILE
        self.kind = kind_of(transform)
        if self.kind is None:
            raise UsageError(f"transform {self.recipe}: not a transform: pass an albumentations pipeline, a "
                             f"torchvision v2 transform, or a callable that takes and returns an (S, S, 3) uint8 image")
        self.moves = self.kind == "albumentations" and moves_pixels(transform)
        self.record = record
        self._pipeline = keypoint_pipeline(transform) if self.kind == "albumentations" else None
        self._recording = None   # the same pipeline saving which transforms it applied (`applied`), made when asked

    def __repr__(self) -> str:
        return f"CropTransform({self.recipe})"

    def __call__(self, image: np.ndarray, words: CropWords, seed: int, where: str,
                 applied: list | None = None) -> tuple[np.ndarray, CropWords]:
        """(the transformed crop, its words) for the crop `image` uint8 (S, S, 3) and its words, drawn from `seed`
        (crop_seed); where: the image, as an error names it. Words are the same object unless the transform
        moves pixels. applied: a list to which the names of the albumentations transforms that fired on this crop
        are added (albumentations' save_applied_params: the same draws, recorded; left as it is for a torch
        transform or a callable, whose draws are not known)."""
        points = words.points
        try:
            with seeded(seed, torch_too=self.kind == "torch"):
                if self._pipeline is not None:
                    pipeline = self._pipeline if applied is None else self.recording()
                    seed_pipeline(pipeline, seed)
                    if self.moves:
                        out = pipeline(image=image, keypoints=points.reshape(-1, 2))
                        points = np.asarray(out["keypoints"], np.float32)[:, :2]
                    else:
                        out = pipeline(image=image)
                    if applied is not None:
                        applied.extend(name for name, _ in out.get("applied_transforms") or ())
                    result = out["image"]
                elif self.kind == "torch":
                    result = torch_image(self.transform(torch_tensor(image)))
                else:
                    result = self.transform(image)
        except Exception as e:   # noqa: BLE001 - any failure of the user's code, named
            raise TransformError(f"{self.label}: transform {failing_transform(e, self.transform)} "
                                 f"failed on {where}: {type(e).__name__}: {e}") from e
        result = self.check(result, image, where)
        if not self.moves:
            return result, words
        return result, moved_words(points, words, image.shape[0])

    def culprit(self, image: np.ndarray) -> str:
        """The name of the first transform of an albumentations pipeline that, applied alone to the crop (its
        probability 1), changes its size, channels or dtype; else the transform's own name. Run only once the whole
        pipeline gave such a result."""
        if self.kind != "albumentations":
            return describe(self.transform)
        import copy
        for t in leaf_objects(self.transform):
            alone = copy.deepcopy(t)
            alone.p = 1.0
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = np.asarray(alone(image=image.copy())["image"])
            except Exception:   # noqa: BLE001 - one that fails alone says nothing of the size
                continue
            if out.dtype != image.dtype or out.shape != image.shape:
                return type(t).__name__
        return describe(self.transform)

    def recording(self):
        """The keypoint pipeline that also returns the transforms it applied ("applied_transforms")."""
        if self._recording is None:
            self._recording = keypoint_pipeline(self.transform, save_applied_params=True)
        return self._recording

    def check(self, result, image: np.ndarray, where: str) -> np.ndarray:
        """The transform's result as uint8 (S, S, 3) like the crop `image`, refused (TransformError) when it is
        anything else, naming the transform of the pipeline that made it so (culprit)."""
        out = np.asarray(result) if not isinstance(result, np.ndarray) else result
        shape = image.shape
        if out.dtype != np.uint8 or out.shape != shape:
            raise TransformError(f"{self.label}: transform {self.culprit(image)} gave {out.dtype} "
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


def leaf_objects(transform) -> list:
    """The transforms of an albumentations pipeline, depth first (the compositions' members)."""
    inner = getattr(transform, "transforms", None)
    if isinstance(inner, (list, tuple)):
        return [leaf for t in inner for leaf in leaf_objects(t)]
    return [transform]


def seed_pipeline(node, seed: int, place: tuple[int, ...] = ()) -> None:
    """An albumentations transform or pipeline seeded for one crop: each node's generators from (seed, its place in
    the tree), so that every transform draws on its own (albumentations' set_random_seed gives them all one seed,
    and transforms of one probability would fire together)."""
    own = seed if not place else int.from_bytes(hashlib.blake2b(
        f"{seed}/{'.'.join(map(str, place))}".encode(), digest_size=8, person=SEED_SALT).digest(), "little")
    node.set_random_seed(own)   # a composition passes it to its members: each is seeded again below
    for k, t in enumerate(getattr(node, "transforms", None) or ()):
        if hasattr(t, "set_random_seed"):
            seed_pipeline(t, seed, (*place, k))


def keypoint_pipeline(transform, save_applied_params: bool = False):
    """The user's transform inside a Compose that carries the words' corners as keypoints through it ("xy", none
    removed when it leaves the image: a word that leaves the crop becomes don't-care, it does not vanish);
    save_applied_params: the result also names the transforms applied (the draws are the same)."""
    import albumentations as A
    more = {"save_applied_params": True} if save_applied_params else {}
    with warnings.catch_warnings():   # a pipeline of pixel transforms: "no transform to process" the keypoints
        warnings.simplefilter("ignore", UserWarning)
        return A.Compose([transform], keypoint_params=A.KeypointParams(format="xy", remove_invisible=False), **more)


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
            before, after = signed_polygon_area(words.points[idx]), signed_polygon_area(points[idx])
            mirrored = idx[np.sign(before) * np.sign(after) < 0]
            points[mirrored] = points[mirrored[:, [1, 0, 3, 2]]]
        lo = np.minimum.reduceat(points, offsets[:-1], axis=0)
        hi = np.maximum.reduceat(points, offsets[:-1], axis=0)
        inside = np.all((lo >= 0) & (hi <= size) & np.isfinite(lo) & np.isfinite(hi), axis=1)
        care[~inside] = 0
    return CropWords(points, offsets, care)


class seeded:
    """Inside, numpy's and Python's global generators (and torch's, torch_too) seeded with `seed`; after, each
    back where it was, so that a reading thread leaves the training process's streams as they were. One thread of
    a process at a time: the generators are the process's, and a second thread seeding them between another's seed
    and draw (a reading thread beside the caller's own CacheDataset, or a pipeline object both use) would give that
    crop another thread's numbers."""
    lock = threading.Lock()

    def __init__(self, seed: int, torch_too: bool = False):
        self.seed, self.torch_too = seed, torch_too

    def __enter__(self):
        self.lock.acquire()
        self.numpy_state, self.python_state = np.random.get_state(), random.getstate()
        np.random.seed(self.seed)
        random.seed(self.seed)
        if self.torch_too:
            try:
                import torch
                self.torch_rng = torch.random.fork_rng(devices=[])
                self.torch_rng.__enter__()
                torch.manual_seed(self.seed)
            except BaseException:
                self.__exit__(None, None, None)   # the generators put back and the lock released
                raise
        return self

    def __exit__(self, *exc) -> None:
        if self.torch_too and hasattr(self, "torch_rng"):
            self.torch_rng.__exit__(*exc)
        np.random.set_state(self.numpy_state)
        random.setstate(self.python_state)
        self.lock.release()


# a process forked while one of its threads held the lock would wait for it forever: the child starts with its own
os.register_at_fork(after_in_child=lambda: setattr(seeded, "lock", threading.Lock()))


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
