"""`python -m clustercert` runs the command line."""

import sys

from clustercert.cli.app import entry

sys.exit(entry())
