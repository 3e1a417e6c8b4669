"""``python -m dlrm_exp.report PATH [PATH ...]``: see :mod:`dlrm_exp.record.report`."""

import sys

from dlrm_exp.record.report import main

if __name__ == "__main__":
    sys.exit(main())
