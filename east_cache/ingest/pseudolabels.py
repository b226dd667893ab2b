"""How a UFO file marks pseudo-labels (words a model predicted, kept as training data), and the line that reports
them: `east-cache pseudo` writes the marks, ingest counts the marked images, the build's plan and `info` say how
many there are.

A file of pseudo-labels carries the top-level member PROVENANCE (what made it: the predictions file, the model,
the score thresholds) as its first member, which no other UFO reader looks at, and each of its images the tag
PSEUDO_TAG in the image's own "tags" list (an image copied into another file keeps it, for tools that filter by
tag). The build counts the images of the files that carry the mark: a file's first member is read, not the file.
"""
from __future__ import annotations

import io
from collections import Counter

from east_cache.ingest import jsonstream
from east_cache.ingest.files import open_regular
from east_cache.ingest.objects import source_path

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


def carries_mark(json_path) -> bool:
    """Whether a UFO file begins with the PROVENANCE member; a file that cannot be read does not (ingest names
    what is wrong with it)."""
    head = file_head(json_path)
    return head is not None and PROVENANCE in head[0]


def file_head(json_path) -> tuple[dict, bool] | None:
    """(the top-level members before the first image, whether the file lists an image) of a UFO file, read up to
    its first image only; None when it cannot be read (ingest names what is wrong with it)."""
    rest, listed = {}, False
    try:
        with io.TextIOWrapper(open_regular(source_path(json_path)), encoding="utf-8-sig") as f:
            for _ in jsonstream.members(f, "images", rest=rest):
                listed = True
                break   # the first image: every member before it is in rest
    except (ValueError, OSError):
        return None
    return rest, listed


def marked_files(records) -> list[list]:
    """[[UFO file, images], ...] of the UFO files among the records' sources that carry the mark."""
    counts = Counter(r.source for r in records)
    return [[source, n] for source, n in sorted(counts.items()) if carries_mark(source)]
