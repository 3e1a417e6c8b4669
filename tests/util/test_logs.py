import logging
import warnings

from dlrm_exp.util.logs import _LibraryInfoFilter, quiet_cpu_dense_lookup


def _record(path: str, message: str, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("root", level, path, 1, message, None, None)


def test_torchrecs_notes_on_each_data_parallel_table_are_dropped_and_its_warnings_kept():
    """52 lines of them on a 2-rank model=tiny run with sharding=dataparallel (review)."""
    keep = _LibraryInfoFilter().filter
    utils = "/site-packages/torchrec/distributed/utils.py"
    planners = "/site-packages/torchrec/distributed/planner/planners.py"
    assert not keep(_record(utils, "Sharding Type is data_parallel, caching params will be ..."))
    assert not keep(_record(planners, "Sharding spec not found for sparse.t_cat_0.weight"))
    assert keep(_record(utils, "something else went wrong"))
    assert keep(_record("/work/src/dlrm_exp/x.py", "Sharding spec not found for x"))
    assert not keep(_record(utils, "an INFO line", logging.INFO))
    codecs = "/site-packages/torchrec/distributed/fbgemm_qcomm_codec.py"  # (replaced by our line)
    assert not keep(_record(codecs, "FP8 reduce-scatter runs in ..."))


def test_the_untrue_autograd_warning_of_fbgemms_dense_lookup_is_silenced():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_cpu_dense_lookup()
        warnings.warn(
            "fbgemm::dense_embedding_codegen_lookup_function: an autograd kernel was not "
            "registered to the Autograd key(s)",
            UserWarning,
            stacklevel=1,
        )
        warnings.warn("fbgemm::other_op: an autograd kernel was not registered", UserWarning,
                      stacklevel=1)  # fmt: skip
    assert [str(w.message) for w in caught] == [
        "fbgemm::other_op: an autograd kernel was not registered"
    ]
