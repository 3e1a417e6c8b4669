"""Batches built ahead of the training step, in a background thread.

A batch is read, decoded and assembled (a Parquet row group, a multi-hot expansion, a
``KeyedJaggedTensor``) before the pipeline copies it to the device. Built inline, all of that
sits on the step's critical path while the device waits. TorchRec's DLRM example avoids that
with a ``DataLoader`` (worker processes, ``pin_memory=True``). Here one thread builds the next
``depth`` batches from the same iterator, in the same order, so results do not change. On
CUDA it pins them (``Batch.pin_memory``), so that the pipeline's ``non_blocking`` copy is
asynchronous. pyarrow's decoding and torch's and numpy's kernels release the GIL while they run.
"""

import queue
import threading
from collections.abc import Iterable, Iterator

from torchrec.datasets.utils import Batch

#: How often a blocked producer checks whether the consumer has gone (seconds).
_POLL_SECONDS = 0.1


class _Failed:
    """The producer's exception, handed to the consumer to raise."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


def prefetched(batches: Iterable[Batch], depth: int, pin: bool = False) -> Iterator[Batch]:
    """``batches`` in order, built up to ``depth`` ahead by a daemon thread (``depth`` 0:
    inline, as they come), pinned to page-locked memory when ``pin``.

    An exception raised while building a batch (a ``DataError`` of a bad row group) is raised
    here, at that batch. Closing the iterator early (training stopped, an error in the step)
    stops the thread at its next batch.
    """
    if depth <= 0:
        yield from (b.pin_memory() if pin else b for b in batches)
        return
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in batches:
                if not offer(batch.pin_memory() if pin else batch):
                    return
        except BaseException as error:  # handed over, raised in the consumer
            offer(_Failed(error))
            return
        offer(_DONE)

    thread = threading.Thread(target=produce, name="dlrm_exp-prefetch", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not _DONE:
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()
