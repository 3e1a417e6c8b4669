"""``python -m dlrm_exp``: see :mod:`dlrm_exp.cli`."""

from dlrm_exp.cli import main

if __name__ == "__main__":
    main()
