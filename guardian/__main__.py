"""``python -m guardian`` is ``tether guardian`` (how the front-end starts one)."""

import sys

from guardian.cli import main

sys.exit(main())
