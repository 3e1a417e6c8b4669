"""The package layout holds: every room's "May import:" contract is true, imports point one way
down the flow, no import circle, and the wheel lists every package.

The checks read source with the standard library's ``ast``; nothing is imported. The planted
violations are written under ``tmp_path``, never into ``src/``.
"""

import ast
import re
import tomllib
from pathlib import Path

from conftest import REPO

SRC = REPO / "src" / "dlrm_exp"

#: The rooms from the top of the flow to the bottom. A module may import its own room and the
#: rooms below it, never one above (entry -> modes -> factories -> loop -> record, with the rooms
#: they stand on below them).
LAYERS = [
    {"cli", "__main__", "report"},  # entry points
    {"bench"},
    {"modes"},
    {"factories"},
    {"planning"},
    {"loop"},
    {"perf"},
    {"distributed"},
    {"data"},
    {"record"},
    {"config"},
    {"util", "errors", "__init__"},
]
#: Top-level modules that are not rooms: what anyone may import.
SHARED = {"errors", "__init__"}


def _room(module: str) -> str:
    """``dlrm_exp.planning.job`` -> ``planning``; ``dlrm_exp`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _level(room: str) -> int:
    levels = [i for i, layer in enumerate(LAYERS) if room in layer]
    assert levels, f"room {room} has no place in LAYERS (and docs/architecture.md's list)"
    return levels[0]


def _module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _modules(src: Path) -> dict[str, Path]:
    return {_module_name(p, src): p for p in src.rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The dlrm_exp modules ``path`` imports (at any depth, lazily or by string for the mode
    registry), as the most specific known module each names."""
    tree = ast.parse(path.read_text())
    named: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named.append(node.module)
            named.extend(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            named.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named.append(node.value)
    return {name for name in named if name in known and name.startswith("dlrm_exp")}


def _graph(src: Path) -> dict[str, set[str]]:
    modules = _modules(src)
    known = set(modules)
    return {m: _imports(p, known) - {m} for m, p in modules.items()}


def may_import(src: Path) -> dict[str, set[str]]:
    """Each room's contract: the names listed after ``May import:`` in its ``__init__.py``
    docstring, up to the sentence's end.

    Raises:
        AssertionError: a room has no contract, or it names something that is not a room.
    """
    rooms = {p.name for p in src.iterdir() if (p / "__init__.py").is_file()}
    names = rooms | {p.stem for p in src.glob("*.py")}
    contracts = {}
    for room in rooms:
        doc = ast.get_docstring(ast.parse((src / room / "__init__.py").read_text())) or ""
        found = re.search(r"May import:\s*(.*?)[.;](\s|$)", doc, re.DOTALL)
        assert "Owns:" in doc and found, f"{room}/__init__.py: no 'Owns:' / 'May import:'"
        listed = {re.sub(r"\(.*", "", part).strip() for part in found.group(1).split(",")}
        unknown = listed - names
        assert not unknown, f"{room}/__init__.py: 'May import:' names no room: {unknown}"
        contracts[room] = listed
    return contracts


def contract_violations(src: Path) -> list[str]:
    """``module imports other (room X may import only ...)`` for every import outside its
    room's contract (top-level modules such as the entry point are not rooms)."""
    contracts = may_import(src)
    out = []
    for module, imported in sorted(_graph(src).items()):
        room = _room(module)
        if room not in contracts:
            continue
        allowed = contracts[room] | {room} | SHARED
        for other in sorted(imported):
            if _room(other) not in allowed:
                out.append(
                    f"{module} imports {other} (room {room} may import only "
                    f"{', '.join(sorted(contracts[room]))})"
                )
    return out


def import_cycles(src: Path) -> list[list[str]]:
    """The modules of every import circle (strongly connected components with more than one
    module, Tarjan's algorithm)."""
    graph = _graph(src)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _package(root: Path, files: dict[str, str]) -> Path:
    """A throwaway ``dlrm_exp`` tree under ``root`` with ``files`` (path -> source)."""
    src = root / "dlrm_exp"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


def test_every_room_has_a_layer_and_a_contract():
    rooms = set(may_import(SRC))
    assert rooms <= set().union(*LAYERS)


def test_every_room_imports_only_what_its_contract_lists():
    assert contract_violations(SRC) == []


def test_contracts_only_list_rooms_below_their_own():
    upward = [
        f"{room} lists {other}"
        for room, listed in may_import(SRC).items()
        for other in listed
        if _level(other) < _level(room)
    ]
    assert upward == []


def test_no_module_imports_a_room_above_its_own():
    upward = [
        f"{module} imports {other}"
        for module, imported in _graph(SRC).items()
        for other in imported
        if _level(_room(other)) < _level(_room(module))
    ]
    assert upward == []


def test_no_import_circle():
    assert import_cycles(SRC) == []


def test_a_planted_import_outside_the_contract_is_caught(tmp_path):
    src = _package(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "",
            "loop/__init__.py": '"""Owns: the loop.\n\nMay import: config, errors."""\n',
            "loop/trainer.py": "from dlrm_exp.config import Config\n",
            "config/__init__.py": '"""Owns: the schema.\n\nMay import: errors."""\n',
            "factories/__init__.py": '"""Owns: factories.\n\nMay import: config."""\n',
            "factories/experiment.py": "x = 1\n",
        },
    )
    assert contract_violations(src) == []
    (src / "loop" / "planted.py").write_text(
        "def f():\n    from dlrm_exp.factories.experiment import x\n"
    )
    assert contract_violations(src) == [
        "dlrm_exp.loop.planted imports dlrm_exp.factories.experiment "
        "(room loop may import only config, errors)"
    ]


def test_a_planted_import_circle_is_caught(tmp_path):
    src = _package(
        tmp_path,
        {
            "__init__.py": "",
            "record/__init__.py": "",
            "record/a.py": "from dlrm_exp.record.b import y\nx = 1\n",
            "record/b.py": "y = 2\n",
        },
    )
    assert import_cycles(src) == []
    (src / "record" / "b.py").write_text("import dlrm_exp.record.a\ny = 2\n")
    assert import_cycles(src) == [["dlrm_exp.record.a", "dlrm_exp.record.b"]]


def test_the_wheel_lists_every_package_under_src():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    on_disk = {_module_name(p.parent / "__init__.py") for p in SRC.rglob("__init__.py")}
    conf = {"dlrm_exp.conf"} | {
        "dlrm_exp.conf." + ".".join(d.relative_to(REPO / "conf").parts)
        for d in (REPO / "conf").rglob("*")
        if d.is_dir()
    }
    assert listed - conf == on_disk
    assert conf <= listed  # every conf/ folder, so setuptools packages it without a warning
    assert pyproject["tool"]["setuptools"]["package-dir"]["dlrm_exp.conf"] == "conf"


def test_the_documented_import_direction_is_the_one_checked():
    """docs/architecture.md's list of rooms is LAYERS, in order (each was written by hand)."""
    page = (REPO / "docs" / "architecture.md").read_text()
    block = page.split("## Import direction", 1)[1].split("```", 2)[1]
    steps = [step.strip() for step in block.split("->")]
    entry = re.fullmatch(r"entry \((.*)\)", steps[0])
    assert entry is not None and set(entry.group(1).split(", ")) == LAYERS[0]
    assert [{step} for step in steps[1:-1]] == LAYERS[1:-1]
    assert {*steps[-1].split(" / "), "__init__"} == LAYERS[-1]
