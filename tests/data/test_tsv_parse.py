"""The vectorized TSV parser against a plain per-row Python reading of the same lines."""

import numpy as np
import pytest

from dlrm_exp.data.criteo_format import criteo_lines
from dlrm_exp.data.preprocess.tsv_parse import EMPTY, REASONS, VALID, iter_blocks, parse_block


def reference(line: str):
    """(label, dense, sparse), the rejection reason, or ``"empty"`` (an empty line, no
    row), by the documented rules."""
    if line in ("", "\r"):
        return "empty"
    fields = line.split("\t")
    if not 14 <= len(fields) <= 40:
        return "field_count"
    fields += [""] * (40 - len(fields))
    if fields[0] not in ("0", "1"):
        return "label"
    dense = []
    for f in fields[1:14]:
        body = f[1:] if f.startswith("-") else f
        if f and (not body.isdigit() or not body.isascii() or len(body) > 18):
            return "dense"
        dense.append(int(f or "0"))
    sparse = []
    for f in fields[14:]:
        if len(f) > 8 or any(c not in "0123456789abcdefABCDEF" for c in f):
            return "categorical"
        sparse.append(int(f or "0", 16))
    return int(fields[0]), dense, sparse


def parse_lines(lines):
    buf = np.frombuffer(("\n".join(lines) + "\n").encode() + b"\0" * 8, dtype=np.uint8)
    return parse_block(buf)


def check_against_reference(lines):
    block = parse_lines(lines)
    expected = [reference(line) for line in lines]
    valid = [e for e in expected if not isinstance(e, str)]
    assert block.num_lines == len(lines)
    named = {VALID: None, EMPTY: "empty"}
    assert [REASONS[r] if r >= 0 else named[r] for r in block.reasons] == [
        e if isinstance(e, str) else None for e in expected
    ]
    assert block.labels.tolist() == [e[0] for e in valid]
    assert block.dense.tolist() == [e[1] for e in valid]
    assert block.sparse.tolist() == [e[2] for e in valid]


def test_generated_rows_match_reference():
    check_against_reference(criteo_lines(3000, seed=1, empty_rate=0.2, strip_trailing_rate=0.5))


@pytest.mark.parametrize(
    "field, position",
    [
        ("2", 0),  # label
        ("", 0),
        ("01", 0),
        ("-", 3),  # dense: sign alone
        ("1x", 3),
        ("12345678901234567890", 3),  # 20 digits
        ("-123456789012", 5),  # long negative: valid
        ("-12345678", 5),  # sign and 8 digits: more than one 8-byte word
        ("-1234567", 5),  # sign and 7 digits: one word
        ("-0", 5),
        ("--5", 5),
        ("-x", 5),
        ("\x05\x05", 7),  # control bytes below the tab
        ("123456789", 5),  # 9 digits: valid
        ("99999999", 5),  # 8 digits: valid
        ("+5", 5),
        (" 7", 5),
        ("ABCDEF01", 20),  # upper-case hex: valid
        ("abc", 20),  # short hex: valid
        ("abcdefg1", 20),
        ("123456789", 20),  # 9 hex digits
        ("\x15\x15", 20),  # control characters
        ("é", 20),
        ("1:2", 20),
    ],
)
def test_field_edge_cases(field, position):
    fields = ["1"] + [str(i) for i in range(13)] + [f"{i:08x}" for i in range(26)]
    fields[position] = field
    check_against_reference(["\t".join(fields), "\t".join(["0"] + ["1"] * 13 + ["a"] * 26)])


def test_field_counts():
    full = ["1"] + ["2"] * 13 + ["ff"] * 26
    lines = ["\t".join(full[:n]) for n in (1, 13, 14, 27, 39, 40, 41)] + ["", "\r", " "]
    check_against_reference(lines)


def test_blocks_cover_every_line_once(tmp_path):
    lines = criteo_lines(5000, seed=2, strip_trailing_rate=0.3)
    path = tmp_path / "day_0"
    path.write_text("\n".join(lines))  # no final newline
    blocks = list(iter_blocks(path, block_bytes=10_000))
    assert len(blocks) > 10
    assert [first for _, first in blocks][0] == 1
    total = 0
    for buf, first_line in blocks:
        assert first_line == total + 1
        total += parse_block(buf).num_lines
    assert total == 5000
