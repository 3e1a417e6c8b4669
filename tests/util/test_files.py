"""``dlrm_exp.util.files``: reading the JSON markers and caches the framework leaves."""

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
