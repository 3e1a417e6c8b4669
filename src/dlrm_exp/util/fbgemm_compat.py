"""FBGEMM's import-time "no entry" warning, dropped for the release pairs tested here: FBGEMM
warns through the root logger while it is imported, before any logging of ours is set up (in a
spawned worker, while the worker's function is unpickled), so ``import dlrm_exp`` installs the
filter on the root logger itself."""

import logging
import re

#: FBGEMM release -> the torch release it was tested with here (docs/install.md, the supported
#: sets). FBGEMM 1.6.0's compatibility table lacks its own version: on the oldest supported set
#: every run warned "_fbgemm_torch_compat_table has no entry" once per library it loads (14
#: times on CPU and on CUDA, in each worker). Dropped for these pairs only: any other pair, and
#: FBGEMM's "not guaranteed to be compatible" warning, still show.
TESTED_FBGEMM_TORCH = {"1.6.0": "2.11.", "1.8.0": "2.13.", "1.9.0": "2.14."}
_NO_ENTRY = re.compile(
    r"_fbgemm_torch_compat_table has no entry for (\S+) of FBGEMM;\s+"
    r"cannot determine compatibility with PyTorch (\S+)"
)


def _tested_pair_unlisted(record: logging.LogRecord) -> bool:
    """Whether ``record`` is FBGEMM's "no entry" warning for a pair of releases tested here."""
    if not record.pathname.endswith("/fbgemm_gpu/__init__.py"):
        return False
    found = _NO_ENTRY.search(record.getMessage())
    if found is None:
        return False
    fbgemm, torch_version = found.groups()
    return torch_version.startswith(TESTED_FBGEMM_TORCH.get(fbgemm, "-"))


def _keeps(record: logging.LogRecord) -> bool:
    """A root-logger filter (logging takes a callable): False for FBGEMM's "no entry" warning
    of a tested release pair."""
    return not _tested_pair_unlisted(record)


def drop_tested_fbgemm_warning() -> None:
    """Filter FBGEMM's "no entry" warning of a tested release pair on the root logger, which
    FBGEMM warns through while it is imported: in a spawned worker that is before any handler
    of ours exists (``import dlrm_exp`` calls this). Idempotent."""
    logging.getLogger().addFilter(_keeps)
