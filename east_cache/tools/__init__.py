"""The commands that read files without torch, beside `build`: info, verify, coverage, the sample data set a build
without --data generates, cross-validation folds (split), pseudo-labels (pseudo), the data set check (check:
duplicates, anomalies, the train/val warning), and training runs compared from their folders (runs, with run_recipe:
a run's recipe as log.jsonl's header holds it). Tools import ingest, sample, store and build (and convert's writer,
of their layer) only, never torch; the commands that look at a cache through the reader (bench, show) are
east_cache/inspect/'s."""
