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

#: One rank of a 2-rank gloo group whose collectives time out after 2 s: computes through
#: on_rank_zero three times (once failing on rank 0 with a user error, once for 4 s with a
#: longer ``wait``); prints what it received and leaves a file per computation.
RANK = textwrap.dedent(
    """
    import json, sys, time
    from datetime import timedelta
    from pathlib import Path
    import torch.distributed as dist
    from dlrm_exp.errors import DataError
    from dlrm_exp.util.rank_zero import on_rank_zero

    port, rank, folder = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2,
                            timeout=timedelta(seconds=2))

    def compute(what):
        (folder / f"{what}_computed_by_{rank}").touch()
        if what == "fail":
            raise DataError(f"bad file (seen by rank {rank})")
        if what == "slow":
            time.sleep(4)
        return {"from": rank, "rows": [1, 2, 3]}

    got = {"result": on_rank_zero(lambda: compute("ok"))}
    try:
        on_rank_zero(lambda: compute("fail"))
    except DataError as err:
        got["error"] = str(err)
    got["waited"] = on_rank_zero(lambda: compute("slow"), wait=timedelta(seconds=60))
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
    try:
        outputs = [p.communicate(timeout=120)[0] for p in ranks]
    finally:
        for p in ranks:
            p.kill()
    assert [p.returncode for p in ranks] == [0, 0], outputs
    result = {"from": 0, "rows": [1, 2, 3]}
    for got in map(json.loads, outputs):  # the slow one outlasted the 2 s collective timeout
        assert got == {"result": result, "error": "bad file (seen by rank 0)", "waited": result}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fail_computed_by_0",
        "ok_computed_by_0",
        "slow_computed_by_0",
    ]


def test_without_a_process_group_it_simply_computes():
    assert on_rank_zero(lambda: 7) == 7
    with pytest.raises(DataError, match="bad"):
        on_rank_zero(lambda: (_ for _ in ()).throw(DataError("bad")))
