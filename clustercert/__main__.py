"""`python -m clustercert` runs the command line."""

import sys

from clustercert.cli import main

sys.exit(main())
