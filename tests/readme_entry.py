"""One of the README's commands as the data-centric loop's shell runs it in tests/test_readme.py: `python
tests/readme_entry.py east-train ARGS...` runs that command's main() with ARGS, each flag of EAST_README_FAST (JSON:
the test's FAST, by command) in place of the README's of the same name, else added (small pages, one step on the
CPU: what a user would not type). Not a test module: the shell starts it once per command."""
from __future__ import annotations

import json
import os
import sys

from helpers import with_flags


def main() -> int:
    kind, args = sys.argv[1], sys.argv[2:]
    fast = json.loads(os.environ["EAST_README_FAST"])
    args = with_flags(args, fast.get(args[0] if kind == "east-cache" else kind, []))
    if kind == "east-cache":
        from east_cache.cli import main as run
        return run(args, prog="east-cache")
    if kind == "east-train":
        from east_cache.train.train import main as run
    else:
        from east_cache.predict.predict import main as run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
