"""How close a run came to the machine: the ``utilization`` entry of ``metrics.json``.

Achieved rates are per rank (the global samples/s divided by the world size), compared with
the peaks measured in the rank's own process (:mod:`dlrm_exp.perf.peak`, on its device, its
threads and the dense precision's dtype).
"""

from dataclasses import asdict, dataclass
from typing import Any

import torch

from dlrm_exp.config import Config, DensePrecision
from dlrm_exp.perf.flops import dense_flops, embedding_bytes_per_sample
from dlrm_exp.perf.peak import Peak, measured_peak

#: The torch dtype of each dense precision: what autocast computes the dense part in
#: (:mod:`dlrm_exp.factories.precision`) and the peak is measured in.
DENSE_DTYPES = {
    DensePrecision.fp32: torch.float32,
    DensePrecision.bf16: torch.bfloat16,
    DensePrecision.fp16: torch.float16,
}


@dataclass(frozen=True)
class Utilization:
    """Dense compute and embedding traffic of a run against the measured peaks.

    Attributes:
        dense_flops_per_sample: forward + backward FLOPs of the dense part per training
            sample (:mod:`dlrm_exp.perf.flops`).
        dense_flops_per_sec: achieved dense FLOP/s per rank (None: no throughput measured).
        peak_matmul_flops_per_sec: the rank's measured ``torch.mm`` peak, FLOP/s.
        fraction_of_matmul_peak: achieved / peak dense FLOP/s.
        embedding_bytes_per_sample: embedding bytes one training sample moves (lookup +
            fused update, an upper bound).
        embedding_bytes_per_sec: achieved embedding bytes/s per rank.
        peak_copy_bytes_per_sec: the rank's measured copy bandwidth, bytes/s.
        fraction_of_copy_peak: achieved embedding bytes/s / copy bandwidth.
        peak_dtype: the dtype of the matmul peak (the dense precision's).
        peak_key: the machine and setting the peak was measured on (its cache key).
    """

    dense_flops_per_sample: int
    dense_flops_per_sec: float | None
    peak_matmul_flops_per_sec: float
    fraction_of_matmul_peak: float | None
    embedding_bytes_per_sample: int
    embedding_bytes_per_sec: float | None
    peak_copy_bytes_per_sec: float
    fraction_of_copy_peak: float | None
    peak_dtype: str
    peak_key: str

    def to_json(self) -> dict[str, Any]:
        """The ``utilization`` entry of ``metrics.json`` (keys are the field names)."""
        return asdict(self)


def utilization(
    cfg: Config, samples_per_sec: float | None, world_size: int, peak: Peak
) -> Utilization:
    """The utilization of a run of ``cfg`` that trained ``samples_per_sec`` global samples/s
    on ``world_size`` ranks, against ``peak`` (one rank's)."""
    flops = dense_flops(cfg.model).training
    emb = embedding_bytes_per_sample(
        cfg.model, cfg.optimizer.sparse_optimizer, cfg.data.pooling_factors()
    )
    per_rank = None if samples_per_sec is None else samples_per_sec / world_size
    flops_rate = None if per_rank is None else flops * per_rank
    bytes_rate = None if per_rank is None else emb * per_rank
    return Utilization(
        dense_flops_per_sample=flops,
        dense_flops_per_sec=flops_rate,
        peak_matmul_flops_per_sec=peak.matmul_flops_per_sec,
        fraction_of_matmul_peak=None
        if flops_rate is None
        else flops_rate / peak.matmul_flops_per_sec,
        embedding_bytes_per_sample=emb,
        embedding_bytes_per_sec=bytes_rate,
        peak_copy_bytes_per_sec=peak.copy_bytes_per_sec,
        fraction_of_copy_peak=None if bytes_rate is None else bytes_rate / peak.copy_bytes_per_sec,
        peak_dtype=peak.dtype,
        peak_key=peak.key,
    )


def rank_peak(cfg: Config, device: torch.device) -> Peak:
    """This rank's cached (or newly probed) peak for the run's dense precision."""
    return measured_peak(device, DENSE_DTYPES[cfg.train.dense_precision])
