"""Augment: the geometry a reader draws for each crop of a page stored resized only (--geometry read), chosen by the
training run, not by the build.

One frozen, validated value, shared by `east-train`, `east-cache show`, `info` and `bench` (flags of the same
names: --height-jitter, --max-rotation, --input-size, --scale, --perspective, --scale-p, --perspective-p), Loader and
CacheDataset (augment=Augment(...)), and a checkpoint (to_dict). Each epoch a crop draws, in this order, from its
crop_rng generator alone (east_cache/sample/epoch_geometry.py):
- height h ~ U[1 - height_jitter, 1 + height_jitter]: the page's height scaled by h, its width kept;
- angle a ~ U[-max_rotation, max_rotation] degrees, about the page's centre (its direction: where the matrix is made,
  sample/epoch_geometry.py page_warp);
- with probability scale_p, a scale s ~ U[scale[0], scale[1]]: both sides scaled by s (multi-scale training), else 1;
- with probability perspective_p, a perspective: each corner of the crop's source square (side input_size, in the
  frame after height, rotation and scale) moved by dx, dy ~ U[-p, p] x input_size each, independently, and that
  quadrilateral mapped onto the crop (p = perspective; a quad moved inward zooms in, outward shows more);
then the crop of side input_size px, word-balanced, in the frame after height, rotation and scale.
Nothing is drawn for a part that is off (scale (1, 1), perspective 0): the baseline's draws stay what they were.

Height jitter, rotation and crop size default to None, "the cache's": a reader resolves them to the values its
cache was built with (resolve, when the Augment is given to it; Augment.of_cache), as the flags default to them, so
Augment(scale=(0.5, 1)) on a cache built with --input-size 512 cuts 512-px crops. Scale 1 and no perspective are
fixed defaults, as the cache has none; a reader without an Augment of its own takes the cache's values for all.
With --geometry build the page is stored warped: its height and rotation are frozen, and a reader refuses an
Augment that asks for other ones (check_frozen).
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from east_cache.bounds import Bound, flag_number
from east_cache.config import HEIGHT_JITTER, INPUT_SIZE, MAX_ROTATION, READER_ONLY, BuildConfig
from east_cache.errors import UsageError, cache_command

SCALE = Bound(integer=False, least=0.125, most=4, note="the page's sides times U[s0, s1]")
PERSPECTIVE = Bound(integer=False, least=0, most=0.25, note="each corner of the crop's source moved by up to p of "
                                                             "its side")
PROBABILITY = Bound(integer=False, least=0, most=1)
NUMBERS = {"height_jitter": HEIGHT_JITTER, "max_rotation": MAX_ROTATION, "input_size": INPUT_SIZE,
           "perspective": PERSPECTIVE, "scale_p": PROBABILITY, "perspective_p": PROBABILITY}
FLAGS = ("height_jitter", "max_rotation", "input_size", "scale", "perspective", "scale_p", "perspective_p")
CACHE_S = READER_ONLY   # the fields whose default, None, is the cache's value: the build's reader-only options


@dataclass(frozen=True)
class Augment:
    """The reader's geometric draw (the module docstring says what each part does to the words). None: the cache's
    value, resolved by the reader (resolve)."""
    height_jitter: float | None = None   # height x U[1 - j, 1 + j]; the cache's --height-jitter (0.2 by default)
    max_rotation: float | None = None    # degrees, U[-r, r] about the page's centre; the cache's (10 by default)
    input_size: int | None = None        # px, side of the square crop; the cache's --input-size (1024 by default)
    scale: tuple[float, float] = (1.0, 1.0)   # the page's sides x U[s0, s1] before the crop; (1, 1): off
    perspective: float = 0.0           # each corner of the crop's source moved by up to p x its side; 0: off
    scale_p: float = 1.0               # chance that a crop draws a scale (else 1)
    perspective_p: float = 1.0         # chance that a crop draws a perspective (else none)

    def __post_init__(self) -> None:
        for name, bound in NUMBERS.items():
            value = getattr(self, name)
            if value is None and name in CACHE_S:
                continue
            if bound.wrong_kind(value) or not bound.contains(value):
                raise UsageError(f"--{flag(name)} {value}: must be {bound.accepted()}")
        if self.input_size is not None and self.input_size % 32:
            raise UsageError(f"--input-size {self.input_size} must be a positive multiple of 32 (the VGG backbone's "
                             f"stride)")
        scale = tuple(self.scale) if isinstance(self.scale, (tuple, list)) else ()
        if len(scale) != 2 or any(SCALE.wrong_kind(s) or not SCALE.contains(s) for s in scale) or scale[0] > scale[1]:
            raise UsageError(f"--scale {self.scale}: must be two numbers S0,S1 with S0 <= S1, each {SCALE.accepted()}")
        object.__setattr__(self, "scale", (float(scale[0]), float(scale[1])))
        for name in ("height_jitter", "max_rotation", "perspective", "scale_p", "perspective_p"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def resolved(self) -> bool:
        """Whether every field holds a value (none left to the cache)."""
        return all(getattr(self, k) is not None for k in CACHE_S)

    def resolve(self, cfg: BuildConfig) -> "Augment":
        """This draw with the fields left to the cache (None) at the values cfg, the cache's build options, holds."""
        return dataclasses.replace(self, **{k: getattr(cfg, k) for k in CACHE_S if getattr(self, k) is None})

    @property
    def scales(self) -> bool:
        """Whether a crop draws a scale."""
        return self.scale != (1.0, 1.0) and self.scale_p > 0

    @property
    def tilts(self) -> bool:
        """Whether a crop draws a perspective."""
        return self.perspective > 0 and self.perspective_p > 0

    @classmethod
    def of_cache(cls, cfg: BuildConfig, **changes) -> "Augment":
        """The cache's build values for height jitter, rotation and crop size (scale 1, no perspective), with
        `changes` (field names; None: keep)."""
        return cls(**{k: v for k, v in changes.items() if v is not None}).resolve(cfg)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["scale"] = list(self.scale)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Augment":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (tuple(v) if k == "scale" else v) for k, v in d.items() if k in known})

    def describe(self) -> str:
        """One line: what each crop draws (a field not resolved yet: "the cache's")."""
        h, r = self.height_jitter, self.max_rotation
        parts = ["height x the cache's" if h is None else f"height x U[{1 - h:g}, {1 + h:g}]",
                 "rotation the cache's" if r is None else f"rotation U[-{r:g}, {r:g}] deg"]
        if self.scales:
            parts.append(f"scale U[{self.scale[0]:g}, {self.scale[1]:g}]" + p_text(self.scale_p))
        if self.tilts:
            parts.append(f"perspective {self.perspective:g}" + p_text(self.perspective_p))
        return ", ".join(parts) + (", the cache's crop side" if self.input_size is None else
                                   f", {self.input_size} px crop")

    def check_frozen(self, cfg: BuildConfig, where: str) -> None:
        """A cache whose pages are stored warped (--geometry build, --crop build) froze height, rotation and crop
        size at its build, and draws no scale or perspective: refuse any other value, naming the rebuild."""
        if cfg.warps_at_read:
            return
        frozen, asked = Augment.of_cache(cfg), self.resolve(cfg)
        if asked == frozen:
            return
        changed = [f"--{flag(k)} {fmt(getattr(asked, k))} (built with {fmt(getattr(frozen, k))})" for k in FLAGS
                   if getattr(asked, k) != getattr(frozen, k)]
        variants = " --variants 1" if cfg.variants > 1 else ""
        raise UsageError(f"{where} stores its pages warped (--geometry {cfg.geometry}, --crop {cfg.crop}): its height, "
                         f"rotation and crop size were drawn at its build and it draws no scale or perspective, so "
                         f"{', '.join(changed)} cannot be read from it; rebuild it with `{cache_command('build')} "
                         f"--out {where} --geometry read --crop read{variants}` to choose the augmentation when "
                         f"training, or drop those flags")


def flag(name: str) -> str:
    return name.replace("_", "-")


def fmt(value) -> str:
    return ",".join(f"{v:g}" for v in value) if isinstance(value, tuple) else f"{value:g}"


def p_text(p: float) -> str:
    return "" if p == 1 else f" (p {p:g})"


def parse_scale(text: str) -> tuple[float, float]:
    """argparse's type= for --scale: "S0,S1" (or one number S: S,S), each a finite number in SCALE's range."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or not all(SCALE.contains(v) for v in values) or values[0] > values[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: must be S0,S1 with S0 <= S1, each {SCALE.accepted()}")
    return values


def add_flags(parser, what: str = "each crop") -> None:
    """The Augment flags on an argparse parser, default None: the cache's build values (scale 1, perspective 0)."""
    g = parser.add_argument_group("augmentation (--geometry read caches; default: the values the cache was built "
                                  "with, scale 1, no perspective)")
    cache = " (default: the cache's)"
    g.add_argument("--height-jitter", type=flag_number(HEIGHT_JITTER), help=f"{what}: height x U[1-j, 1+j]{cache}")
    g.add_argument("--max-rotation", type=flag_number(MAX_ROTATION),
                   help=f"{what}: rotation U[-r, r] degrees{cache}")
    g.add_argument("--input-size", type=flag_number(INPUT_SIZE), help=f"crop side, px (a multiple of 32){cache}")
    g.add_argument("--scale", type=parse_scale, metavar="S0,S1",
                   help=f"{what}: the page's sides x U[S0, S1] (default: 1,1, off)")
    g.add_argument("--perspective", type=flag_number(PERSPECTIVE),
                   help=f"{what}: each corner of the crop's source moved by up to P x its side (default: 0, off)")
    g.add_argument("--scale-p", type=flag_number(PROBABILITY), help="chance of a scale draw (default: 1)")
    g.add_argument("--perspective-p", type=flag_number(PROBABILITY), help="chance of a perspective draw (default: 1)")


def given(args) -> dict:
    """The add_flags flags given (field name -> value) of parsed flags or a TrainConfig: what Augment.of_cache changes
    of a cache's build values."""
    return {k: getattr(args, k) for k in FLAGS if getattr(args, k, None) is not None}
