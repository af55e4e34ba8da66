"""`python -m adarl.report`: see adarl/report/command.py."""

import sys

from adarl.report.command import main

sys.exit(main())
