"""The planner's collective estimates of narrower tables, at the width their outputs travel.

TorchRec's ``EmbeddingPerfEstimator`` sizes a shard's forward and backward collectives (the
all-to-all, reduce-scatter or all-gather of pooled embeddings and their gradients) by the
*weights'* element size unless a qcomms codec sets the width
(``planner.utils.extract_comm_data_type_size``). The kernels output fp32 whatever the weights'
precision (FBGEMM's ``output_dtype`` default, which TorchRec keeps), so for fp16 tables
without a codec in a direction those collectives move twice the bytes TorchRec counts: the
same ``comm_bytes_per_step`` as fp32 tables were measured on 2 ranks (review). Plan mode
printed half the time, and ``sharding=auto`` saw fp16 tables as cheaper to send.
:class:`OutputSizedComms` runs after TorchRec's estimator and scales each such shard's
``fwd_comms`` / ``bwd_comms`` (TorchRec's model: bytes over bandwidth, linear in the width) to
fp32 outputs.
"""

import dataclasses
from typing import Any

from torchrec.distributed.planner.types import ShardEstimator, ShardingOption
from torchrec.distributed.types import ShardingType

from dlrm_exp.planning.storage import FP32_BYTES


class OutputSizedComms(ShardEstimator):
    """Scales the collective estimates of tables narrower than fp32 to fp32 outputs, in each
    direction that no qcomms codec narrows (run after TorchRec's ``EmbeddingPerfEstimator``).

    data_parallel tables are left as they are: their collective is the all-reduce of the
    table's gradient, at the weights' width.

    Args:
        forward_codec: a qcomms codec sets the forward collectives' width
            (``qcomms.forward_precision`` set), which TorchRec then counts right.
        backward_codec: the same for the backward collectives.
    """

    def __init__(self, forward_codec: bool, backward_codec: bool) -> None:
        self._forward = not forward_codec
        self._backward = not backward_codec

    def estimate(self, sharding_options: list[ShardingOption], *_: Any, **__: Any) -> None:
        """Update ``sharding_options``' shard perf in place (TorchRec's interface; the sharder
        map TorchRec passes is not needed)."""
        for option in sharding_options:
            width = option.tensor.element_size()
            if width >= FP32_BYTES or option.sharding_type == ShardingType.DATA_PARALLEL.value:
                continue
            scale = FP32_BYTES / width
            for shard in option.shards:
                if shard.perf is None:
                    continue
                shard.perf = dataclasses.replace(
                    shard.perf,
                    fwd_comms=shard.perf.fwd_comms * (scale if self._forward else 1),
                    bwd_comms=shard.perf.bwd_comms * (scale if self._backward else 1),
                )
