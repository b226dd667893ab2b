"""Storage: the on-disk format, which sample lives where, the parallel build, the manifest."""
