"""Build configuration: every parameter that decides what a cached sample contains.

The semantic fields form the cache fingerprint: change one and the whole cache is rebuilt.
Things that only decide *how* the build runs (job count, verbosity) live outside this class.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from east_cache.bounds import COUNT, MAX_PROCESSES, NON_NEGATIVE, SEED, Bound
from east_cache.errors import UsageError

# Tags that make a word a don't-care region (ROI = 0) instead of a positive. The baseline
# dropped these words, turning them into background the model is punished for detecting.
DEFAULT_IGNORE_TAGS = ("masked", "excluded-region", "maintable", "stamp")

STRATEGIES = ("whole", "image", "batch", "chunked")
AUTO = "auto"   # a strategy the build resolves (build/strategy.py) before anything is fingerprinted
MAP_SCALES = (0.5, 0.25)
# read: the cache holds each variant's warped page and the reader cuts a new crop every epoch (page.py);
# build: it holds one crop per variant, made at build time (make.py), the same every time it is read.
CROP_MODES = ("read", "build")
# How a page's image is stored (--crop read): raw tiles, read at memory speed, or JPEG tiles, a crop decoding only
# those it covers; auto: the build picks one (build/strategy.py choose_codec), and its manifest records which.
IMAGE_CODECS = ("raw", "jpeg")
# Chroma of jpeg pages: "420" stores colour at half resolution both ways (luminance, where text edges are, stays
# whole; smaller, and faster to decode), "444" at full resolution (for text told from its ground by colour alone).
IMAGE_CHROMAS = ("420", "444")
# Where a page's height jitter and rotation are drawn (--crop read): read = every epoch, by the reader, from a page
# stored resized only (sample/epoch_geometry.py); build = once per variant, at build time, the page stored warped.
GEOMETRY_MODES = ("read", "build")
# Options that only a reader uses where pages are stored resized only (warps_at_read): the height jitter and rotation
# it draws and the crop side it cuts (east_cache/augment.py Augment; a page's stored word weights are for STORED's crop
# side, and a reader of another derives its own). They stay out of what the stored pages depend on (stored()): a
# build that changes only them copies every page and records the new values as the readers' defaults.
READER_ONLY = ("height_jitter", "max_rotation", "input_size")

# The ranges of the build's numbers (east_cache/bounds.py): its flags' types, and BuildConfig checks them too
INPUT_SIZE = Bound(least=32, note="a multiple of 32, the VGG backbone's stride")
IMAGE_QUALITY = Bound(least=1, most=100, note="libjpeg's quality")
HEIGHT_JITTER = Bound(integer=False, least=0, below=1)
MAX_ROTATION = Bound(integer=False, least=0, most=180, note="degrees")
JOBS = Bound(least=-1, most=MAX_PROCESSES, note="-1: every core")
NUMBERS = {"image_size": COUNT, "input_size": INPUT_SIZE, "variants": COUNT, "seed": SEED,
           "height_jitter": HEIGHT_JITTER, "max_rotation": MAX_ROTATION, "crop_tries": COUNT, "min_area": NON_NEGATIVE,
           "drop_area": NON_NEGATIVE, "chunk_size": COUNT, "batch_size": COUNT, "image_quality": IMAGE_QUALITY}


@dataclass(frozen=True)
class BuildConfig:
    image_size: int = 2048          # px, long side of the source image after resizing
    input_size: int = 1024          # px, side of the square training crop
    map_scale: float = 0.5          # target map resolution / input resolution (0.5: stride-2 head, 0.25: stride 4)
    variants: int = 1               # augmented variants cached per image; epoch e reads (e + offset_i) mod K
    seed: int = 0                   # root of every random draw; with the image name and variant it fixes a sample
    height_jitter: float = 0.2      # height scaled by U[1 - j, 1 + j]
    max_rotation: float = 10.0      # degrees, rotation drawn from U[-r, r] about the image centre
    crop: str = "read"              # where crops are cut: read = a new one every epoch from a cached page, build = frozen
    geometry: str = "read"          # --crop read: where height jitter and rotation are drawn: read = every epoch from a
                                    # page stored resized only, build = once per variant into a stored warped page
                                    # (--crop build freezes them with the crop, whatever this says)
    crop_tries: int = 1000          # --crop build: random crops tested for cutting a legible word before giving up
    ignore_tags: tuple[str, ...] = DEFAULT_IGNORE_TAGS  # word tags that make a don't-care region
    min_area: float = 10.0          # px^2 in the annotation frame; smaller words become don't-care
    drop_area: float = 1.0          # px^2; smaller words are dropped entirely (degenerate)
    fit_polygons: bool = False      # True: words with 5+ points become their minimum-area quad; False: don't-care
    strategy: str = AUTO            # records per file: whole = all, image = K, batch = batch_size, chunked = chunk_size;
                                    # auto: the build picks one, and its manifest records the one it picked
    chunk_size: int = 5000          # records per file for the chunked strategy
    batch_size: int = 8             # records per file for the batch strategy
    image_codec: str = AUTO         # a page's image: raw tiles, or jpeg tiles; auto: the build picks (raw when the
                                    # raw cache fits comfortably in RAM); --crop build records keep raw images
    image_quality: int = 90         # libjpeg quality 1..100 of jpeg page tiles
    image_chroma: str = "420"       # chroma of jpeg page tiles: 420 (half resolution both ways) or 444 (full)
    levels: bool = False            # --geometry read pages: each page's half level stored beside it, which a crop
                                    # drawn at scale < 0.71 reads instead of the page (a quarter of the px); off: such
                                    # a crop reads the page itself at 1/2 (the pages a quarter smaller, built faster)

    def __post_init__(self) -> None:
        if self.strategy not in (AUTO, *STRATEGIES):
            raise UsageError(f"--strategy {self.strategy!r} is not one of {AUTO}, {', '.join(STRATEGIES)}")
        if self.image_codec not in (AUTO, *IMAGE_CODECS):
            raise UsageError(f"--image-codec {self.image_codec!r} is not one of {AUTO}, {', '.join(IMAGE_CODECS)}")
        if self.image_chroma not in IMAGE_CHROMAS:
            raise UsageError(f"--image-chroma {self.image_chroma!r} is not one of {', '.join(IMAGE_CHROMAS)}")
        if self.crop not in CROP_MODES:
            raise UsageError(f"--crop {self.crop!r} is not one of {', '.join(CROP_MODES)}")
        if self.geometry not in GEOMETRY_MODES:
            raise UsageError(f"--geometry {self.geometry!r} is not one of {', '.join(GEOMETRY_MODES)}")
        if self.warps_at_read and self.variants > 1:
            raise UsageError(f"--variants {self.variants} with --geometry read: every epoch already draws its own "
                             f"height, rotation and crop from the one stored page, so more variants would store "
                             f"copies of it; keep --variants 1, or use --geometry build for {self.variants} frozen "
                             f"warped pages per image")
        if self.map_scale not in MAP_SCALES:
            raise UsageError(f"--map-scale {self.map_scale} must be one of {MAP_SCALES} (a stride-2 or stride-4 head)")
        for name, bound in NUMBERS.items():
            value = getattr(self, name)
            if bound.wrong_kind(value) or not bound.contains(value):
                raise UsageError(f"--{name.replace('_', '-')} {value}: must be {bound.accepted()}")
        if not isinstance(self.levels, bool):
            raise UsageError(f"levels {self.levels!r}: must be True or False")
        if self.input_size % 32 != 0:
            raise UsageError(f"--input-size {self.input_size} must be a positive multiple of 32 (the VGG backbone's "
                             f"stride)")
        # JSON round-trips give lists; keep the dataclass hashable and canonical.
        object.__setattr__(self, "ignore_tags", tuple(sorted(set(self.ignore_tags))))

    @property
    def warps_at_read(self) -> bool:
        """Pages stored resized only, each epoch's height, rotation and crop drawn by the reader."""
        return self.crop == "read" and self.geometry == "read"

    def stored(self) -> "BuildConfig":
        """What the stored samples depend on: this config, with READER_ONLY's fields at their defaults where the
        pages are stored resized only (warps_at_read); elsewhere without `levels`, which only such pages have."""
        if not self.warps_at_read:
            return dataclasses.replace(self, levels=False) if self.levels else self
        return dataclasses.replace(self, **{k: getattr(BuildConfig, k) for k in READER_ONLY})

    @property
    def map_size(self) -> int:
        """Side of the square target maps, in map pixels."""
        return int(round(self.input_size * self.map_scale))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["ignore_tags"] = list(self.ignore_tags)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BuildConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (tuple(v) if k == "ignore_tags" else v) for k, v in d.items() if k in known})

    def fingerprint(self) -> str:
        """Hash of every field the stored samples depend on (stored()); equal fingerprints mean equal samples (with
        the same code version). Only a resolved config has one: "auto" would make one fingerprint stand for several
        layouts or codecs."""
        assert AUTO not in (self.strategy, self.image_codec), "resolve the strategy and codec before fingerprinting"
        blob = json.dumps(self.stored().to_dict(), sort_keys=True).encode()
        return hashlib.blake2b(blob, digest_size=16).hexdigest()
