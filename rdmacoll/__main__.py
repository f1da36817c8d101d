"""python -m rdmacoll: the `rdmacoll` command (rdmacoll/cli.py)."""

import sys

from .cli import main

sys.exit(main())
