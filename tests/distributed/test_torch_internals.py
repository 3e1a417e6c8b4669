"""The private torch hooks behind dlrm_exp.distributed.torch_internals exist in the installed
torch and mean what comm_stats reads them as: a torch upgrade that drops or changes one fails
here, loudly, rather than as wrong byte counts in a run."""

import types

import pytest
import torch

from dlrm_exp.distributed import torch_internals


def test_every_private_hook_exists_in_this_torch():
    torch_internals.check_available()


def test_a_missing_hook_is_named_with_the_torch_version(monkeypatch):
    monkeypatch.delattr(torch._C, "_current_graph_task_id")
    with pytest.raises(RuntimeError, match=r"torch .* lacks torch\._C\._current_graph_task_id"):
        torch_internals.check_available()


def test_in_backward_is_true_only_while_autograd_runs_a_backward_pass():
    seen = []
    x = torch.ones(2, requires_grad=True)
    y = (x * 2).sum()
    x.register_hook(lambda grad: seen.append(torch_internals.in_backward()))
    assert torch_internals.in_backward() is False
    y.backward()
    assert seen == [True]


def _reports_its_caller():
    return torch_internals.caller_module()


def test_caller_module_names_the_module_of_the_calling_code():
    assert _reports_its_caller() == __name__


def test_patched_restores_the_originals_also_after_an_error():
    module = types.ModuleType("m")
    module.f = original = lambda: "original"
    with pytest.raises(KeyError):
        with torch_internals.patched(module, {"f": lambda: "patched"}):
            assert module.f() == "patched"
            raise KeyError
    assert module.f is original
