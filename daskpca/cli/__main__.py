"""``python -m daskpca.cli``: the same as the ``daskpca`` command."""

import sys

from .command import main

sys.exit(main())
