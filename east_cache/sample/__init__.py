"""One sample from one image record: the augmentation warp, the EAST targets, a page's content and the crop draw.
Pure numpy/OpenCV, no I/O beyond decoding the image; every module here is covered by the cache's code-version
hash (build/fingerprint.py), all but the crop draw's read-time fast form (READ_ONLY there)."""
