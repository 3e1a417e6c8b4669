"""How close a run came to the machine: the ``utilization`` entry of ``metrics.json``.

Achieved rates are per rank (the global samples/s divided by the world size), compared with
the peaks measured in the rank's own process (:mod:`dlrm_exp.perf.peak`, on its device, its
threads and the dense precision's dtype) and with the theoretical matmul peak that bounds them
(:mod:`dlrm_exp.perf.theoretical_peak`). A measured peak above the bound, or a fraction above 1
of either peak, cannot be right: it is listed in ``measurement_errors`` and the fraction is
recorded as None, never as a valid number above 1.
"""

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from dlrm_exp.config import Config, DensePrecision
from dlrm_exp.perf.flops import dense_flops, embedding_bytes_per_sample
from dlrm_exp.perf.peak import Peak, measured_peak
from dlrm_exp.perf.theoretical_peak import TheoreticalPeak, theoretical_peak

#: The torch dtype of each dense precision: what autocast computes the dense part in
#: (:mod:`dlrm_exp.factories.precision`) and the peak is measured in.
DENSE_DTYPES = {
    DensePrecision.fp32: torch.float32,
    DensePrecision.bf16: torch.bfloat16,
    DensePrecision.fp16: torch.float16,
}


@dataclass(frozen=True)
class Utilization:
    """Dense compute and embedding traffic of a run against the measured and theoretical peaks.

    Attributes:
        dense_flops_per_sample: forward + backward FLOPs of the dense part per training
            sample (:mod:`dlrm_exp.perf.flops`).
        dense_flops_per_sec: achieved dense FLOP/s per rank (None: no throughput measured).
        peak_matmul_flops_per_sec: the rank's measured ``torch.mm`` peak, FLOP/s.
        fraction_of_matmul_peak: achieved / measured peak dense FLOP/s (None: nothing
            measured, or a measurement error).
        embedding_bytes_per_sample: embedding bytes one training sample moves (lookup +
            fused update: an upper bound for fused tables, a lower one for data-parallel
            ones, see docs/performance.md).
        embedding_bytes_per_sec: achieved embedding bytes/s per rank.
        peak_copy_bytes_per_sec: the rank's measured copy bandwidth, bytes/s.
        fraction_of_copy_peak: achieved embedding bytes/s / copy bandwidth (None as above).
        peak_dtype: the dtype of the matmul peak (the dense precision's).
        peak_key: the machine and setting the peak was measured on (its cache key, with the
            rank's thread count).
        peak_measured_at: when the peak was measured, ISO 8601 UTC.
        peak_source: ``probed`` (in this run) or ``cached`` (confirmed by a spot check).
        peak_reason: why it was probed, or the spot check that confirmed it.
        theoretical_matmul_flops_per_sec: the bound of the matmul peak, FLOP/s (None: unknown
            CPU or GPU).
        theoretical_basis: how the bound was computed (cores x clock x FLOPs per cycle, or the
            data sheet).
        fraction_of_theoretical_peak: achieved / theoretical dense FLOP/s (None as above).
        measurement_errors: one line per impossible reading (a measured peak above the bound,
            a fraction above 1); empty when all is consistent.
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
    peak_measured_at: str = ""
    peak_source: str = ""
    peak_reason: str = ""
    theoretical_matmul_flops_per_sec: float | None = None
    theoretical_basis: str = "unknown"
    fraction_of_theoretical_peak: float | None = None
    measurement_errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The ``utilization`` entry of ``metrics.json`` (keys are the field names)."""
        return asdict(self)


def checked_fraction(
    what: str, achieved: float | None, peak: float | None, errors: list[str]
) -> float | None:
    """``achieved / peak``, or None when either is unknown or the fraction exceeds 1 (then a
    line naming ``what`` is appended to ``errors``: a rate above the peak is a measurement
    error, not a utilization)."""
    if achieved is None or not peak:
        return None
    fraction = achieved / peak
    if fraction > 1:
        errors.append(
            f"{what}: achieved {achieved:.4g} exceeds the peak {peak:.4g} ({fraction:.2f}x): "
            "measurement error, fraction not reported"
        )
        return None
    return fraction


def utilization(
    cfg: Config,
    samples_per_sec: float | None,
    world_size: int,
    peak: Peak,
    bound: TheoreticalPeak | None = None,
) -> Utilization:
    """The utilization of a run of ``cfg`` that trained ``samples_per_sec`` global samples/s
    on ``world_size`` ranks, against ``peak`` (one rank's) and its theoretical ``bound``."""
    flops = dense_flops(cfg.model, cfg.train.symmetric_interaction).training
    emb = embedding_bytes_per_sample(
        cfg.model, cfg.optimizer.sparse_optimizer, cfg.data.pooling_factors()
    )
    per_rank = None if samples_per_sec is None else samples_per_sec / world_size
    flops_rate = None if per_rank is None else flops * per_rank
    bytes_rate = None if per_rank is None else emb * per_rank
    errors: list[str] = []
    bound_rate = None if bound is None else bound.flops_per_sec
    checked_fraction(
        f"measured {peak.dtype} matmul peak vs theoretical ({bound and bound.basis})",
        peak.matmul_flops_per_sec,
        bound_rate,
        errors,
    )
    peak_is_possible = not errors  # above its bound, no fraction of it holds
    return Utilization(
        dense_flops_per_sample=flops,
        dense_flops_per_sec=flops_rate,
        peak_matmul_flops_per_sec=peak.matmul_flops_per_sec,
        fraction_of_matmul_peak=checked_fraction(
            "dense FLOP/s vs measured matmul peak", flops_rate, peak.matmul_flops_per_sec, errors
        )
        if peak_is_possible
        else None,
        embedding_bytes_per_sample=emb,
        embedding_bytes_per_sec=bytes_rate,
        peak_copy_bytes_per_sec=peak.copy_bytes_per_sec,
        fraction_of_copy_peak=checked_fraction(
            "embedding bytes/s vs copy bandwidth", bytes_rate, peak.copy_bytes_per_sec, errors
        ),
        peak_dtype=peak.dtype,
        peak_key=peak.key,
        peak_measured_at=peak.measured_at,
        peak_source=peak.source,
        peak_reason=peak.reason,
        theoretical_matmul_flops_per_sec=bound_rate,
        theoretical_basis="unknown" if bound is None else bound.basis,
        fraction_of_theoretical_peak=checked_fraction(
            "dense FLOP/s vs theoretical matmul peak", flops_rate, bound_rate, errors
        ),
        measurement_errors=errors,
    )


def rank_peak(cfg: Config, device: torch.device) -> Peak:
    """This rank's cached (or newly probed) peak for the run's dense precision."""
    return measured_peak(device, DENSE_DTYPES[cfg.train.dense_precision])


def rank_bound(cfg: Config, device: torch.device) -> TheoreticalPeak | None:
    """This rank's theoretical matmul peak for the run's dense precision (its threads on CPU)."""
    return theoretical_peak(device, DENSE_DTYPES[cfg.train.dense_precision])
