"""``dlrm_exp.util.files``: reading the JSON markers and caches the framework leaves."""

import pytest

from dlrm_exp.util.files import read_json_object


def test_a_json_object_is_read_and_anything_else_counts_as_none(tmp_path):
    good, listed, broken = tmp_path / "good.json", tmp_path / "list.json", tmp_path / "bad.json"
    good.write_text('{"days": [0, 1]}')
    listed.write_text("[0, 1]")  # JSON, but no object: edited by hand
    broken.write_text('{"days": [0,')  # left half-written
    assert read_json_object(good) == {"days": [0, 1]}
    assert read_json_object(listed) is None
    assert read_json_object(broken) is None
    assert read_json_object(tmp_path / "missing.json") is None
    assert read_json_object(tmp_path) is None  # a folder: unreadable as a file


def test_an_atomic_write_reaches_the_disk_before_its_name_does(tmp_path, monkeypatch):
    """A rename alone may reach the disk before the data (power loss, kernel crash): a day's
    marker could then vouch for empty npy files. The file is synced, then renamed, then its
    folder synced (preprocess review)."""
    import os

    from dlrm_exp.util import files

    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(files.os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(
        files.os, "replace", lambda a, b: events.append("replace") or real_replace(a, b)
    )
    files.write_text_atomic(tmp_path / "marker.json", "{}")
    assert events == ["fsync", "replace", "fsync"]
    assert (tmp_path / "marker.json").read_text() == "{}"


def test_text_files_are_utf8_whatever_the_locale(tmp_path):
    """Hydra writes ``.hydra/*.yaml`` in UTF-8; the framework's own files (schemas, plans,
    records) are UTF-8 too, also under a C locale whose encoding is ASCII (a column named
    ``prix_€`` was written in the locale's encoding, or refused by it)."""
    import os
    import subprocess
    import sys

    script = (
        "import sys; from pathlib import Path; "
        "from dlrm_exp.util.files import write_json_atomic, write_text_atomic, "
        "read_json_object; "
        "p = Path(sys.argv[1]); write_text_atomic(p / 'a.yaml', 'prix_\\u20ac: 1\\n'); "
        "write_json_atomic(p / 'b.json', {'prix_\\u20ac': 1}); "
        "print(read_json_object(p / 'b.json') == {'prix_\\u20ac': 1})"
    )
    env = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert (tmp_path / "a.yaml").read_bytes() == "prix_€: 1\n".encode()


def test_an_output_folder_under_a_file_is_said_to_be_under_a_file(tmp_path):
    """``predict.output=data.tsv/p.parquet`` said "File exists" (review)."""
    from dlrm_exp.errors import ConfigError
    from dlrm_exp.util.files import check_writable

    afile = tmp_path / "data.tsv"
    afile.write_text("1\n")
    with pytest.raises(ConfigError, match=rf"{afile} is a file, not a folder \(choose another"):
        check_writable(afile / "out", "predict.output")
    # no room to make is no remedy for a file in the way (it was offered: review)
    with pytest.raises(ConfigError, match=r"predict.output=\.\.\.\)$"):
        check_writable(afile / "out", "predict.output")
