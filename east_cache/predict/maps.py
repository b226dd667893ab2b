"""What the score maps of a prediction held (MapStats: candidates above --score-thresh, a histogram, the decode's
seconds) and the warning east-predict prints where they say something about the model: most of the map above the
threshold (an undertrained model, slow to decode), or no word at all."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MOST_OF_THE_MAP = 0.5         # share of map pixels above --score-thresh past which a warning says what it costs
FEW_CANDIDATES = 0.05         # the share of map pixels a --score-thresh suggested for 0 words leaves as candidates
SCORE_BINS = 100              # the score histogram MapStats keeps: bins of 0.01 over [0, 1]


@dataclass
class MapStats:
    """What the score maps of a prediction held, over every image and pass: map pixels, those above --score-thresh
    (candidates, each a quad decoded and merged), a histogram of the scores, and the seconds spent decoding."""
    pixels: int = 0
    candidates: int = 0
    highest: float = 0.0
    decode_s: float = 0.0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(SCORE_BINS, np.int64))

    def add(self, score: np.ndarray, thresh: float, seconds: float) -> None:
        if not score.size:
            return
        self.pixels += score.size
        self.candidates += int(np.count_nonzero(score > thresh))
        self.highest = max(self.highest, float(score.max()))
        self.decode_s += seconds
        self.hist += np.bincount(np.clip((score * SCORE_BINS).astype(np.int64), 0, SCORE_BINS - 1).ravel(),
                                 minlength=SCORE_BINS)

    def threshold_for(self, share: float) -> float | None:
        """The lowest bin edge t (a multiple of 1 / SCORE_BINS) above which at most `share` of the pixels lie, where
        some pixel lies above it; None where none does (a flat map: every pixel in the top bin's neighbourhood)."""
        above = np.cumsum(self.hist[::-1])[::-1]   # pixels at or above each bin's bottom edge
        fits = [k for k in range(1, SCORE_BINS) if 0 < above[k] <= share * self.pixels]
        return fits[0] / SCORE_BINS if fits else None


def map_warning(stats: MapStats, thresh: float, words: int, images: int, took: float, checkpoint: str) -> str:
    """What the score maps say about the model, where it is worth a line: most of the map above --score-thresh (an
    undertrained model: every such pixel a candidate to decode, its words no text), or no word at all, with the
    highest score and the threshold that would leave FEW_CANDIDATES of the map, where one does."""
    share = stats.candidates / stats.pixels if stats.pixels else 0.0
    if share > MOST_OF_THE_MAP:
        return (f"{share:.0%} of the map pixels ({stats.candidates:,} of {stats.pixels:,}) scored above --score-thresh "
                f"{thresh:g}, each a candidate word to decode and merge ({stats.decode_s:.1f} of the {took:.1f} s): "
                f"the model scores most of every image as text, as an undertrained one does ({checkpoint}), and its "
                f"{words} word(s) are no detections; predict with a checkpoint trained longer, not a lower "
                f"--score-thresh")
    if not images or words:
        return ""
    said = (f"0 words in all {images} image(s): no map pixel scored above --score-thresh {thresh:g} (the highest: "
            f"{stats.highest:.2f}; {checkpoint})")
    lower = stats.threshold_for(FEW_CANDIDATES)
    if lower is not None and lower < thresh:
        return (f"{said}; --score-thresh {lower:g} leaves {FEW_CANDIDATES:.0%} of the map or less as candidates, or "
                f"predict with a checkpoint trained longer")
    return (f"{said}; its scores are about the same everywhere, as an undertrained model's are: a lower "
            f"--score-thresh would make most of the map candidates, slow to decode and no text; predict with a "
            f"checkpoint trained longer")
