"""``python -m tether.guardian`` is ``tether guardian`` (the fallback when no script is installed)."""

import sys

from tether.guardian.main import main

sys.exit(main())
