"""The planner's collective estimates of narrower tables, at the width their outputs travel.

TorchRec's ``EmbeddingPerfEstimator`` sizes a shard's forward and backward collectives (the
all-to-all, reduce-scatter or all-gather of pooled embeddings and their gradients) by the
*weights'* element size unless a qcomms codec sets the width
(``planner.utils.extract_comm_data_type_size``). The kernels output fp32 whatever the weights'
precision (FBGEMM's ``output_dtype`` default, which TorchRec keeps), so for fp16 tables
without a codec in a direction those collectives move twice the bytes TorchRec counts: the
same ``comm_bytes_per_step`` as fp32 tables were measured on 2 ranks (review). Plan mode
printed half the time, and ``sharding=auto`` saw fp16 tables as cheaper to send.
:class:`OutputSizedComms` runs after TorchRec's estimator and, where the job builds no codecs,
scales each such shard's ``fwd_comms`` / ``bwd_comms`` (TorchRec's model: bytes over
bandwidth, linear in the width) to fp32 outputs.
"""

import dataclasses
from typing import Any

from torchrec.distributed.planner.types import ShardEstimator, ShardingOption
from torchrec.distributed.types import ShardingType

from dlrm_exp.planning.storage import FP32_BYTES


class OutputSizedComms(ShardEstimator):
    """Scales the collective estimates of tables narrower than fp32 to fp32 outputs, where no
    qcomms codec sets their width (run after TorchRec's ``EmbeddingPerfEstimator``).

    TorchRec builds codecs for both directions or none (``get_qcomm_codecs_registry``: none
    when both are fp32; a null direction gets an fp32 codec), and with codecs counts both
    directions at their codec's width: nothing to correct then. data_parallel tables are
    left as they are: their collective is the all-reduce of the table's gradient, at the
    weights' width.

    Args:
        codecs: the job's qcomms build codecs (a precision other than fp32 in a direction).
    """

    def __init__(self, codecs: bool) -> None:
        self._codecs = codecs

    def estimate(self, sharding_options: list[ShardingOption], *_: Any, **__: Any) -> None:
        """Update ``sharding_options``' shard perf in place (TorchRec's interface; the sharder
        map TorchRec passes is not needed)."""
        if self._codecs:
            return
        for option in sharding_options:
            width = option.tensor.element_size()
            if width >= FP32_BYTES or option.sharding_type == ShardingType.DATA_PARALLEL.value:
                continue
            scale = FP32_BYTES / width
            for shard in option.shards:
                if shard.perf is not None:
                    shard.perf = dataclasses.replace(
                        shard.perf,
                        fwd_comms=shard.perf.fwd_comms * scale,
                        bwd_comms=shard.perf.bwd_comms * scale,
                    )
