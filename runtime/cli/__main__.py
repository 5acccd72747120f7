"""`python -m dsptrain.cli`: the same as the `dsptrain` command."""

import sys

from . import main

sys.exit(main())
