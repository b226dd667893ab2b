"""`python -m preprocess build ...`: the build command under the name the design gives it.

The code lives in the `east_cache` package (east_cache/cli.py is the command line); this package is only the
entry point, so that a folder holding its own dataset.py or east.py (the baseline's) cannot shadow what the
command imports.
"""
