"""``on_rank_zero``: rank 0 computes for every rank (the Parquet scan, the sharding plan); the
other ranks receive the result, or the user error, without computing."""

import json
import socket
import subprocess
import sys
import textwrap

import pytest

from dlrm_exp.errors import DataError
from dlrm_exp.util.rank_zero import on_rank_zero

#: One rank of a 2-rank gloo group: computes twice through on_rank_zero, the second time
#: failing on rank 0 with a user error; prints what it received and leaves a file per compute.
RANK = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch.distributed as dist
    from dlrm_exp.errors import DataError
    from dlrm_exp.util.rank_zero import on_rank_zero

    port, rank, folder = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)

    def compute(what):
        (folder / f"{what}_computed_by_{rank}").touch()
        if what == "fail":
            raise DataError(f"bad file (seen by rank {rank})")
        return {"from": rank, "rows": [1, 2, 3]}

    got = {"result": on_rank_zero(lambda: compute("ok"))}
    try:
        on_rank_zero(lambda: compute("fail"))
    except DataError as err:
        got["error"] = str(err)
    print(json.dumps(got))
    dist.destroy_process_group()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_rank_zero_computes_once_and_every_rank_gets_its_result_or_error(tmp_path):
    port = _free_port()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(port), str(rank), str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [json.loads(p.communicate(timeout=120)[0]) for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0]
    for got in outputs:
        assert got == {
            "result": {"from": 0, "rows": [1, 2, 3]},
            "error": "bad file (seen by rank 0)",
        }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fail_computed_by_0", "ok_computed_by_0"]


def test_without_a_process_group_it_simply_computes():
    assert on_rank_zero(lambda: 7) == 7
    with pytest.raises(DataError, match="bad"):
        on_rank_zero(lambda: (_ for _ in ()).throw(DataError("bad")))
