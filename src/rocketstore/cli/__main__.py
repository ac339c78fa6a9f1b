"""``python -m rocketstore.cli``: the same as the ``rocketstore`` console script."""

import sys

from rocketstore.cli import main

sys.exit(main())
