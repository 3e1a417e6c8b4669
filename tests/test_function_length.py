"""No function or method in ``src/dlrm_exp`` is longer than 60 lines (issue 23): a long one is
split into named steps. Counted from ``def`` to its last line, decorators excluded."""

import ast
from pathlib import Path

from conftest import REPO

MAX_LINES = 60
SRC = REPO / "src" / "dlrm_exp"


def long_functions(path: Path, root: Path = REPO, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (N lines)`` (path relative to ``root``) for each function or method of
    ``path`` longer than ``limit`` lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                where = path.relative_to(root)
                found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_counts_def_to_last_line(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(3))
    path = tmp_path / "m.py"
    path.write_text(f"@staticmethod\ndef f():\n{body}\n\n\ndef g():\n    pass\n")
    assert long_functions(path, tmp_path, limit=4) == []
    assert long_functions(path, tmp_path, limit=3) == ["m.py:2 f (4 lines)"]


def test_no_function_over_60_lines() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert files, f"no sources under {SRC}"
    offenders = [line for path in files for line in long_functions(path)]
    assert not offenders, (
        f"{len(offenders)} function(s) over {MAX_LINES} lines: split them into named steps\n"
        + "\n".join(offenders)
    )
