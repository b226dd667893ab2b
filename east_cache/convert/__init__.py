"""Other text-detection formats to UFO: `python -m preprocess convert --from FORMAT SRC --out ROOT`.

This module only names the formats, so that the CLI can list them without importing any reader.
FORMATS: name -> (module in this package, reader function, does a clockwise source order carry the
reading direction?, one line for --help). Where it does not, quads start at their top-left corner.
"""
from __future__ import annotations

FORMATS = {
    "icdar2015": ("icdar", "read_icdar2015", True,
                  "one gt_NAME.txt or NAME.txt per image, lines x1,y1,...,x4,y4,text (### = illegible)"),
    "sroie": ("icdar", "read_icdar2015", True, "SROIE task 1: the ICDAR 2015 line format, NAME.txt next to NAME.jpg"),
    "icdar2013": ("icdar", "read_icdar2013", True,
                  'one gt_NAME.txt per image, lines xmin ymin xmax ymax "text" (spaces or commas)'),
    "mmocr": ("mmocr", "read_mmocr", True, "MMOCR text-detection JSON: metainfo + data_list of instances"),
    "wildreceipt": ("mmocr", "read_wildreceipt", False,
                    "WildReceipt train.txt/test.txt: JSON lines with file_name, height, width, annotations"),
    "cord": ("cord", "read_cord", True, "CORD split folder: json/NAME.json (valid_line -> words -> quad) + image/"),
    "cocotext": ("cocotext", "read_cocotext", True, "COCO-Text JSON: imgs + anns with mask or bbox, legibility"),
    "totaltext": ("polygons", "read_totaltext", True,
                  "Total-Text txt: poly_gt_NAME.txt, records x: [[...]], y: [[...]], ornt: [...], transcriptions: [...]"),
    "polygon": ("polygons", "read_polygon", True,
                "one NAME.txt per image, lines x1,y1,...,xn,yn,####text (CTW1500 style; ### = illegible)"),
}

FORMATS_HELP = "formats (--from):\n" + "\n".join(f"  {name:12} {doc}" for name, (*_, doc) in FORMATS.items())


def add_arguments(p) -> None:
    """`convert`'s flags, on an argparse parser."""
    from east_cache.location import flag_location   # a URL kept as given, for `convert` to refuse by name
    p.add_argument("--from", dest="fmt", required=True, choices=FORMATS, metavar="FORMAT",
                   help="the source format (listed below)")
    p.add_argument("src", type=flag_location, metavar="SRC", help="the source annotations: a folder of per-image files, or the "
                                                         "annotation file (mmocr, wildreceipt, cocotext); cord: the split folder")
    p.add_argument("--out", type=flag_location, required=True, metavar="ROOT",
                   help="dataset root to write: ROOT/ufo/{split}.json and ROOT/images/; give it to `build --data`")
    p.add_argument("--split", default="train", help="output split name: ROOT/ufo/{split}.json (default: train)")
    p.add_argument("--images", type=flag_location, metavar="DIR",
                   help="where the source images are (default: beside the annotations; cord: image/ beside json/)")
    p.add_argument("--copy", action="store_true", help="copy the images into ROOT/images (default: symbolic links)")
    p.add_argument("--prefix", default="", help="put this before every image name, e.g. cord_, so that names "
                                                "cannot collide with another root's when `build` takes several --data "
                                                "(default: none)")
    p.add_argument("--subset", metavar="SET", help='cocotext: the images whose "set" is SET; "all" for every '
                                                   "image (default: the --split name)")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip lines and images that cannot be read (named and counted at the end) instead of stopping")
    p.add_argument("--force", action="store_true",
                   help="replace an existing ROOT/ufo/{split}.json, and images of the same name in ROOT/images")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
