"""User tools over a cache: info, verify, show, bench, and the built-in sample data set."""
