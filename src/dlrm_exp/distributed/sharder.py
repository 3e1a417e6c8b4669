"""The embedding sharder: TorchRec's, with row-wise types offered on CPU too.

TorchRec's stock ``EmbeddingBagCollectionSharder`` offers ``row_wise``, ``table_row_wise`` and
``grid_shard`` only on CUDA, although the CPU kernels and gloo collectives run them correctly;
:class:`CpuEmbeddingBagCollectionSharder` also offers them on CPU.
"""

from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.types import ModuleSharder, QuantizedCommCodecs, ShardingType

from dlrm_exp.config import QCommsConfig
from dlrm_exp.distributed.managed_collision import managed_collision_sharder
from dlrm_exp.distributed.qcomms import build_qcomm_codecs_registry

_CPU_EXTRA_TYPES = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD)


class CpuEmbeddingBagCollectionSharder(EmbeddingBagCollectionSharder):
    """``EmbeddingBagCollectionSharder`` that also offers row_wise, table_row_wise and
    grid_shard when the compute device is the CPU."""

    def sharding_types(self, compute_device_type: str) -> list[str]:
        types = super().sharding_types(compute_device_type)
        if compute_device_type == "cpu":
            types += [t.value for t in _CPU_EXTRA_TYPES if t.value not in types]
        return types


def build_sharder(
    qcomm_codecs_registry: dict[str, QuantizedCommCodecs] | None,
    stochastic_rounding: bool = True,
) -> CpuEmbeddingBagCollectionSharder:
    """The EBC sharder, with the quantized-communication codecs (None: fp32 collectives) and
    FBGEMM's ``stochastic_rounding`` for the fused update of tables that are not fp32 (a fused
    parameter of every sharded table; FBGEMM's default is true)."""
    return CpuEmbeddingBagCollectionSharder(
        fused_params={"stochastic_rounding": stochastic_rounding},
        qcomm_codecs_registry=qcomm_codecs_registry,
    )


def job_sharders(qcomms: QCommsConfig, stochastic_rounding: bool) -> list[ModuleSharder]:
    """The job's sharders, with the codecs of the ``qcomms`` group and
    ``optimizer.stochastic_rounding``: the EBC sharder first (its ``sharding_types`` are what
    the planner offers), then the managed-collision EBC sharder of ``id_policy=
    managed_collision`` tables (:mod:`dlrm_exp.distributed.managed_collision`), which shards
    their tables with it."""
    ebc = build_sharder(build_qcomm_codecs_registry(qcomms), stochastic_rounding)
    return [ebc, managed_collision_sharder(ebc)]
