"""The build side's user tools: info, verify, coverage, the drawing of a sample (show), and the built-in sample
data set. Tools import ingest, sample and store only; the commands that read a cache (bench, show CACHE) are the
reader's (east_cache/reader/)."""
