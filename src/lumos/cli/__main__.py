"""`python -m lumos.cli`: the `lumos` command."""

import sys

from lumos.cli import main

sys.exit(main())
