"""How a UFO file marks pseudo-labels (words a model predicted, kept as training data), and the line that reports
them: `east-cache pseudo` writes the marks, ingest counts the marked images, the build's plan and `info` say how
many there are.

A file of pseudo-labels carries the top-level member PROVENANCE (what made it: the predictions file, the model,
the score thresholds), which no other UFO reader looks at, and each of its images the tag PSEUDO_TAG in the
image's own "tags" list, so that an image keeps its mark when it is copied into another UFO file. Ingest counts
the tag.
"""
from __future__ import annotations

PSEUDO_TAG = "pseudo"          # in an image entry's "tags": its words were predicted, not annotated
PROVENANCE = "pseudo_labels"   # the top-level member that says where a file's pseudo-labels came from


def is_pseudo(entry) -> bool:
    """Whether a UFO image entry is marked as pseudo-labels."""
    tags = entry.get("tags") if isinstance(entry, dict) else None
    return isinstance(tags, list) and PSEUDO_TAG in tags


def pseudo_line(counts: list, images: int) -> str | None:
    """"N of M images are pseudo-labels (from FILE)" of IngestSummary.pseudo ([UFO file, marked images] per file
    that has any) among M images; None when there are none."""
    if not counts:
        return None
    marked = sum(n for _, n in counts)
    where = (f"from {counts[0][0]}" if len(counts) == 1 else ", ".join(f"{n} from {f}" for f, n in counts))
    return f"{marked} of {images} images are pseudo-labels ({where})"
