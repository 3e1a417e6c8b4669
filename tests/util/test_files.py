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
