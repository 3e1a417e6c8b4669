"""``train.sparse_backward=overlap``: the sparse arch's backward on a helper thread (CPU, 1 rank).

On a CPU, FBGEMM's table backward with its fused optimizer update runs on one thread: the
``fbgemm-gpu-cpu`` wheel is built without OpenMP, so its kernels' ``at::parallel_for`` loops
are serial while the other cores wait (docs/results.md, "The fast setting"). Here the
gradient of the pooled embeddings (B, F, D), once the interaction's backward has produced it,
goes to one helper thread that runs the rest of the sparse backward (TorchRec's output dist,
FBGEMM's backward and update). Meanwhile the training thread goes on with one OpenMP thread
fewer: the dense arch's backward, the dense optimizer step, the next step's input dist and
dense arch forward. The helper holds one core and the training thread the rest (on 2 cores,
one each); more threads than cores slow every OpenMP team.

The next lookup waits for the update (:meth:`SparseBackwardThread.settle` at the top of the
sparse arch's forward), so every lookup sees the previous step's update as in the serial
backward, and the tables are the same bit for bit. Dense weights are equal up to float
rounding: their backward ran on one thread fewer, which can split a matmul's sums
differently. Program order, not timing, sets the training thread's count for each op, so a
run repeats bit for bit. (``torch.set_num_threads`` also sets the count a thread started
meanwhile begins with, such as a batch-prefetch thread; that changes no result.)

The training loop settles the thread at the end of each training segment, before anything
else reads the tables: validation, checkpoints and the end of training come after one;
``mode=verify`` settles it before gathering the tables. The learning-rate schedule may set the
kernels' rate while a backward runs: FBGEMM's CPU lookup takes the rate at its forward (SGD,
Adagrad, row-wise Adagrad: tests/factories). Profiles record the helper's operators too
(:mod:`dlrm_exp.perf.profile` records every thread).

It applies on CPU with one rank, at least 2 threads and no data_parallel table; elsewhere
``overlap`` records a substitution (:func:`overlap_blocker` says why) and ``auto`` runs the
serial backward. With several ranks the helper's
output-dist all-to-all would share the process group with DDP's all-reduce from another
thread, in an order that can differ between ranks; a data_parallel table's gradient goes to
DDP, whose reduction the training thread's backward finishes.
"""

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from dlrm_exp.util.text import first_few

#: The process's one helper thread, set to one OpenMP thread (an executor starts its thread
#: at its first task, so a process that never overlaps has none).
_POOL = ThreadPoolExecutor(1, "sparse-backward", initializer=torch.set_num_threads, initargs=(1,))


class SparseBackwardThread:
    """The sparse backward in flight, if any, with the training thread's thread count to
    restore once it lands."""

    def __init__(self) -> None:
        self._pending: tuple[Future, int] | None = None

    def hand_off(self, attached: torch.Tensor, grad: torch.Tensor) -> None:
        """Run ``attached.backward(grad)`` (the sparse arch's graph, gradient (B, F, D)) on the
        helper thread; the training thread goes on with one thread fewer until :meth:`settle`."""
        self.settle()  # a guard: the sparse arch's forward has settled the last one already
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, threads - 1))
        try:
            self._pending = (_POOL.submit(attached.backward, grad), threads)
        except BaseException:
            torch.set_num_threads(threads)
            raise

    def settle(self) -> bool:
        """Wait for the sparse backward in flight and restore the training thread's count;
        True when one was in flight.

        Raises:
            Exception: what the sparse backward raised, on the training thread.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        future, threads = pending
        torch.set_num_threads(threads)
        future.result()
        return True

    def __deepcopy__(self, memo: dict) -> "SparseBackwardThread":
        # a copied model (e.g. for export) gets its own, with nothing in flight
        return SparseBackwardThread()


class _HandOff(torch.autograd.Function):
    """Identity on the pooled embeddings whose backward hands their gradient to the thread.
    The graph-attached tensor travels in a list, so autograd draws no edge into the sparse
    graph and the training thread's backward stops here."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        anchor: torch.Tensor,
        detached: torch.Tensor,
        attached: list[torch.Tensor],
        thread: SparseBackwardThread,
    ) -> torch.Tensor:
        ctx.attached, ctx.thread = attached[0], thread
        return detached.view_as(detached)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        attached, ctx.attached = ctx.attached, None
        assert attached is not None, "the sparse arch's graph is handed off once (no retain_graph)"
        ctx.thread.hand_off(attached, grad)
        return None, None, None, None


#: A leaf that requires grad, so :class:`_HandOff`'s output does; it never receives a gradient.
_ANCHOR = torch.empty(0, requires_grad=True)


def hand_off(pooled: torch.Tensor, thread: SparseBackwardThread) -> torch.Tensor:
    """``pooled`` (B, F, D), whose backward runs on ``thread``'s helper when it requires grad
    (training); itself otherwise."""
    if not (torch.is_grad_enabled() and pooled.requires_grad):
        return pooled
    return _HandOff.apply(_ANCHOR, pooled.detach(), [pooled], thread)


def overlap_blocker(
    device: str, world_size: int, threads: int, data_parallel: Sequence[str] = ()
) -> str | None:
    """Why ``train.sparse_backward=overlap`` cannot apply to a rank of ``world_size`` on
    ``device`` with ``threads`` threads and the ``data_parallel`` tables of its plan (the run
    then records a substitution); None where it applies."""
    if device != "cpu":
        return f"{device}: its kernels do not hold the host thread; the CPU lever only"
    if world_size > 1:
        return f"{world_size} ranks: the helper's all-to-all would race DDP's all-reduce"
    if threads < 2:
        return f"{threads} thread per rank: no core to overlap on"
    if data_parallel:
        return (
            f"data_parallel tables ({first_few(data_parallel)}): their gradients go through "
            "DDP, on the training thread"
        )
    return None
