"""One sample from one image record: the augmentation warp and the EAST targets. Pure numpy/OpenCV, no I/O
beyond decoding the image; every module here is covered by the cache's code-version hash."""
