"""``train.symmetric_interaction``: the dot interaction with one cast and a symmetric backward
gives TorchRec's ``InteractionArch`` forward values bit for bit and its gradients up to
rounding, in fp32 and under bf16 autocast; it trains; DCN keeps TorchRec's interaction and the
run says so. The comparison runs on the GPU too under ``make gpu-check``."""

import pytest
import torch
from torchrec.models.dlrm import InteractionArch

from conftest import SMALL, compose_cfg
from dlrm_exp.factories.experiment import build_module
from dlrm_exp.factories.interaction import SymmetricInteractionArch, interaction_substitution
from dlrm_exp.modes.train import run_train

CUDA = pytest.param(
    "cuda",
    marks=[
        pytest.mark.cuda,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ],
)


def _forward_and_grads(arch, dense, sparse, autocast):
    dense = dense.detach().requires_grad_()
    sparse = sparse.detach().requires_grad_()
    with torch.autocast(dense.device.type, dtype=torch.bfloat16, enabled=autocast):
        out = arch(dense.to(torch.bfloat16) if autocast else dense, sparse)
    # every output column reaches the gradient
    weights = torch.linspace(-1, 1, out.shape[1], device=out.device)
    grads = torch.autograd.grad((out.float() * weights).sum(), (dense, sparse))
    return out, grads


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize(("autocast", "tolerance"), [(False, 1e-5), (True, 2e-2)])
def test_same_forward_bitwise_and_gradients_up_to_rounding(autocast, tolerance, device):
    generator = torch.Generator().manual_seed(0)
    dense = torch.randn(32, 16, generator=generator).to(device)
    sparse = torch.randn(32, 26, 16, generator=generator).to(device)
    archs = [InteractionArch(26).to(device), SymmetricInteractionArch(26).to(device)]
    ref_out, ref_grads = _forward_and_grads(archs[0], dense, sparse, autocast)
    out, grads = _forward_and_grads(archs[1], dense, sparse, autocast)
    assert out.dtype == ref_out.dtype and out.shape == (32, 16 + 27 * 26 // 2)
    assert torch.equal(out, ref_out)
    for ref, got in zip(ref_grads, grads, strict=True):
        scale = ref.abs().max()
        assert scale > 0 and (ref - got).abs().max() <= tolerance * scale


def test_it_replaces_only_the_dot_interaction_and_trains():
    module = build_module(compose_cfg([*SMALL, "train.symmetric_interaction=true"]))
    assert type(module.model.inter_arch) is SymmetricInteractionArch
    assert not any(True for _ in module.model.inter_arch.parameters())  # checkpoints unchanged
    assert type(build_module(compose_cfg(SMALL)).model.inter_arch) is InteractionArch
    dcn = compose_cfg(["model=mlperf", "train.symmetric_interaction=true"]).model
    substitution = interaction_substitution(dcn, True)
    assert substitution and substitution.ran == "TorchRec's dcn interaction"
    assert interaction_substitution(compose_cfg(SMALL).model, True) is None


@pytest.mark.slow
def test_a_run_with_the_symmetric_interaction_trains_like_torchrecs(tmp_path):
    short = [*SMALL, "train.max_steps=24", "train.progress_bar=false"]
    ours = run_train(compose_cfg([*short, "train.symmetric_interaction=true"]), tmp_path / "a", {})
    theirs = run_train(compose_cfg(short), tmp_path / "b", {})
    assert ours.substitutions == [] and ours.val["auroc"] > 0.6
    assert abs(ours.val["auroc"] - theirs.val["auroc"]) < 1e-3  # fp32: rounding only
