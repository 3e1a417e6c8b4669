"""``train.dense_precision``: the dense part of the DLRM under ``torch.autocast``.

The DLRM's forward (dense arch, embedding lookup, interaction, over arch) runs inside
``torch.autocast(device, dtype)``. Autocast lowers only the ops on its lists (``linear``,
``mm``, ``bmm``, ...), so the dense arch, the interaction's batched dot products and the over
arch compute in bf16 while FBGEMM's embedding kernels, the collectives and the fused sparse
update stay fp32 (they are not autocast ops). Parameters and optimizer state stay fp32; the
logits (B,) are cast back to fp32 before the loss, as in torch's AMP recipe.

fp16 is refused at compose time (:class:`dlrm_exp.config.Config`): it needs a gradient
scaler, and TorchRec's pipeline runs ``backward()`` and the optimizer step itself while the
fused embedding update applies its gradients inside backward, where a scaled gradient would
reach the tables unscaled.
"""

import functools
from typing import Any

import torch
from torchrec.models.dlrm import DLRMTrain

from dlrm_exp.config import DensePrecision
from dlrm_exp.perf.theoretical_peak import MATRIX_UNITS, has_matmul_unit
from dlrm_exp.perf.utilization import DENSE_DTYPES


def apply_dense_precision(module: DLRMTrain, precision: DensePrecision, device_type: str) -> None:
    """Run ``module.model``'s forward under autocast to ``precision`` on ``device_type``
    (``cpu`` / ``cuda``); fp32 leaves it unchanged. The forward is replaced on the instance,
    so parameter names and checkpoints do not change with the precision."""
    if precision is DensePrecision.fp32:
        return
    dlrm = module.model
    forward = dlrm.forward
    dtype = DENSE_DTYPES[precision]

    @functools.wraps(forward)
    def autocast_forward(*args: Any, **kwargs: Any) -> torch.Tensor:
        with torch.autocast(device_type, dtype=dtype):
            logits = forward(*args, **kwargs)
        return logits.float()

    dlrm.forward = autocast_forward


def slow_precision_warning(
    precision: DensePrecision, device_type: str, flags: set[str] | None
) -> str | None:
    """The line to log when ``precision`` will run slower than fp32: on a CPU whose ``flags``
    (``/proc/cpuinfo``, :func:`~dlrm_exp.perf.theoretical_peak.cpu_flags`) name no matmul
    instructions for its dtype (bf16: AVX512-BF16 or AMX-BF16), where torch converts to fp32
    and back around every product (measured 3-20x slower than fp32 on an AVX2 CPU,
    docs/results.md "Dense precision"). None for fp32, on CUDA, or when the flags are unknown."""
    if precision is DensePrecision.fp32 or device_type != "cpu" or flags is None:
        return None
    dtype = str(DENSE_DTYPES[precision]).removeprefix("torch.")
    if has_matmul_unit(flags, dtype):
        return None
    wanted = " or ".join(flag for flag, _, _ in MATRIX_UNITS.get(dtype, ()))
    return (
        f"train.dense_precision={precision.value}: this CPU has no {dtype} matmul instructions "
        f"({wanted} not in /proc/cpuinfo), so torch converts every product to fp32 and back: "
        "expect it slower than fp32 here (3-20x on an AVX2 CPU; docs/results.md, "
        '"Dense precision")'
    )
