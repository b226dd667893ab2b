import sys

from east_cache.cli import MODULE_COMMAND, main

sys.exit(main(prog=MODULE_COMMAND))
