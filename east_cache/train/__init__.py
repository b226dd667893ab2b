"""What trains EAST: east-train, read top to bottom in train.py (the command and the run) and engine.py (the step and
the epoch); its flags and resolved config (config.py), checkpoints (checkpoint.py), what a run does around its steps
and records (runtime.py), the lines it prints first (started.py), validation (validate.py) and the trackers it reports
to (report/). Uses every room below it, east_cache/predict/ to validate on full pages."""
