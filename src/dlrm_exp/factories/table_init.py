"""Sharding-independent initialization of the embedding tables.

TorchRec initializes every shard on its own rank, so one table starts from different values
under different sharding types or world sizes. Here each weight is a pure function of
(seed, table index, row, column): uniform in [-sqrt(1/rows), sqrt(1/rows)] (the default
``init_fn`` of TorchRec's ``EmbeddingBagConfig``), drawn by hashing. Any shard can then be
filled without materializing its table, and every plan starts from the same model, so runs
that differ only in sharding are comparable step by step.

The values are hashed one by one on the host: 4.2M values took 0.08 s on this 2-core CPU,
about 3 s for the quickstart model's 166M values, and the MLPerf model has 26 billion. A job
that loads a checkpoint's weights (resume, evaluate, predict) skips it.
"""

import numpy as np
import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from dlrm_exp.util.hashing import splitmix64, stream_key, unit_interval

_CHUNK_ELEMENTS = 1 << 22  # rows are filled in chunks of about 4M values (32 MiB of hashes)


def table_values(
    seed: int, table_index: int, num_embeddings: int, rows: slice, cols: slice, dim: int
) -> torch.Tensor:
    """Initial weights of ``table[rows, cols]``: (len(rows), len(cols)) float32."""
    bound = np.sqrt(1.0 / num_embeddings)
    key = stream_key(seed, 7919, table_index)
    r = np.arange(rows.start, rows.stop, dtype=np.uint64)[:, None]
    c = np.arange(cols.start, cols.stop, dtype=np.uint64)[None, :]
    u = unit_interval(splitmix64((r * np.uint64(dim) + c) ^ key))
    return torch.from_numpy(((2.0 * u - 1.0) * bound).astype(np.float32))


def _fill(
    target: torch.Tensor, seed: int, index: int, table: EmbeddingBagConfig, row0: int, col0: int
) -> None:
    rows, cols = target.shape
    step = max(1, _CHUNK_ELEMENTS // max(cols, 1))
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        values = table_values(
            seed,
            index,
            table.num_embeddings,
            slice(row0 + start, row0 + stop),
            slice(col0, col0 + cols),
            table.embedding_dim,
        )
        target[start:stop].copy_(values)


@torch.no_grad()
def init_tables(model: torch.nn.Module, tables: list[EmbeddingBagConfig], seed: int) -> None:
    """Overwrite this rank's part of every table of a ``DistributedModelParallel`` model
    (sharded: its local shards at their offsets; data_parallel: the whole replica).

    Raises:
        ValueError: a table has no weight, or more than one, in the model's state dict (the
            ``(key,) = ...`` unpacking of the matching keys fails).
    """
    state = model.state_dict()
    for index, table in enumerate(tables):
        (key,) = [k for k in state if k.endswith(f".{table.name}.weight")]
        weight = state[key]
        if isinstance(weight, ShardedTensor):
            for shard in weight.local_shards():
                row0, col0 = shard.metadata.shard_offsets
                _fill(shard.tensor, seed, index, table, row0, col0)
        else:
            _fill(weight, seed, index, table, 0, 0)
