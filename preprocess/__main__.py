import sys

from preprocess.cli import MODULE_COMMAND, main

sys.exit(main(prog=MODULE_COMMAND))
