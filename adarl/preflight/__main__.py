"""`python -m adarl.preflight`: see adarl/preflight/__init__.py."""

import sys

from adarl.preflight.runner import main

sys.exit(main())
