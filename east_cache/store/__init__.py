"""Storage: the on-disk format and the page record's layout, which sample lives where, the parallel build, the
manifest."""
