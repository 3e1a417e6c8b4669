"""Console hygiene: keep library chatter (TorchRec planner INFO lines, FBGEMM's INFO lines on
the root logger, known deprecation warnings from TorchRec and torch.fx) out of the user's
terminal and log file; our own INFO lines and every library WARNING or worse stay, but for
those a run replaces by its own line, TorchRec's per-table notes on data_parallel tables
(``_NOISE``) and FBGEMM's import-time "no entry" warning of a tested release pair
(:mod:`dlrm_exp.util.fbgemm_compat`)."""

import logging
import warnings
from pathlib import Path

_NOISY_LOGGERS = ("torchrec", "fbgemm_gpu", "torch.fx", "torch.distributed", "torch.nn.parallel")
_NOISY_PATHS = ("/fbgemm_gpu/", "/torchrec/")
#: Records dropped whatever their level, as (source file, message start): TorchRec's codec
#: registry warns, on every rank and whether or not the plan uses a reduce-scatter, that it
#: runs FP8 reduce-scatters in FP16/BF16 (every record of that file: the run reads the codecs
#: back from the built model and says so once, only when it happened,
#: :mod:`dlrm_exp.util.substitution`); and TorchRec's notes of what every data_parallel table
#: is (not a problem): one per table and rank of its sharder ("caching params will be
#: ignored", whether or not any were given), one per table of its planner (a replicated table
#: has no sharding spec); a 2-rank run of ``model=tiny`` printed 52 lines (planning review).
_NOISE = (
    ("/torchrec/distributed/fbgemm_qcomm_codec.py", ""),
    ("/torchrec/distributed/utils.py", "Sharding Type is data_parallel, caching params"),
    ("/torchrec/distributed/utils.py", "Compute Kernel is dense, caching params"),
    ("/torchrec/distributed/planner/planners.py", "Sharding spec not found for "),
)


class _LibraryInfoFilter(logging.Filter):
    """Drops records below WARNING emitted from FBGEMM or TorchRec source files (FBGEMM logs
    its kernel arguments through the root logger, so logger names cannot catch them), and every
    record of ``_NOISE``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if any(record.pathname.endswith(p) and str(record.msg).startswith(m) for p, m in _NOISE):
            return False
        if record.levelno >= logging.WARNING:
            return True
        return not any(p in record.pathname for p in _NOISY_PATHS)


def quiet_libraries() -> None:
    """Apply the filters above to the root handlers (call after Hydra configured logging)."""
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # torch.fx warns once per process that is_fx_tracing() changed meaning; TorchRec calls it.
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    # The elastic agent dumps each failed worker's traceback at ERROR; the entry point reports
    # the failure as one line naming the rank and cause instead.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    # TorchRec logs its (trivial, single-host) process-group topology at WARNING.
    logging.getLogger("torchrec.distributed.comm").setLevel(logging.ERROR)
    flt = _LibraryInfoFilter()
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torchrec(\.|$)")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torchrec(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
    warnings.filterwarnings("ignore", message=r".*is_fx_tracing.*")
    # Raised with the caller's location whenever a sharded model's state dict is read (TorchRec
    # still returns ShardedTensors); nothing a user of this framework can act on.
    warnings.filterwarnings("ignore", message=r".*deprecating ShardedTensor.*")


def quiet_cpu_dense_lookup() -> None:
    """Silence torch's warning that FBGEMM's CPU lookup of data_parallel (dense-kernel)
    tables has no autograd kernel ("silently incorrect behavior", at each backward's first
    pass): FBGEMM runs its autograd Function inside the CPU kernel, and the gradients are
    right (``mode=verify`` of ``sharding=dataparallel`` on 2 ranks deviates 5.4e-07 in the
    tables from one unsharded process, fp32, 20 steps). For a model on CPU only: that is
    where it was checked (diff review)."""
    warnings.filterwarnings(
        "ignore", message=r"fbgemm::dense_embedding_codegen_lookup_function: an autograd kernel"
    )


def configure_worker_logging(log_file: Path | None) -> None:
    """Logging for a spawned worker (Hydra configured only the parent): rank 0 logs INFO to
    stderr and appends to the run's log file; other ranks log warnings only."""
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))  # whatever the locale
    logging.basicConfig(
        level=logging.INFO if log_file is not None else logging.WARNING,
        format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s",
        handlers=handlers,
        force=True,
    )
    quiet_libraries()


def to_log_files(text: str, name: str = "dlrm_exp", level: int = logging.INFO) -> None:
    """Append ``text`` to the run's log files (the root logger's file handlers, e.g. Hydra's
    ``dlrm_exp.log``) without printing it on the console again: for the summary a mode prints
    on stdout, and the error line a refused or failed run prints on stderr."""
    record = logging.LogRecord(name, level, __file__, 0, text, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
