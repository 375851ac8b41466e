"""``python -m harness``: the ``harness`` command line (:func:`harness.cli.main`)."""

import sys

from harness.cli import main

sys.exit(main())
