"""A thin mmap-backed torch Dataset over a cache built by `python -m preprocess build`."""
