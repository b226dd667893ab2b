"""The build side's user tools: info, verify, coverage, the drawing of a sample (show), the built-in sample
data set, cross-validation folds (split) and pseudo-labels (pseudo). Tools import ingest, sample and store (and
convert's writer, of their layer) only; the commands that read a cache (bench, show CACHE) are the
reader's (east_cache/reader/)."""
