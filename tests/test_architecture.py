"""The package layout holds: imports point one way down the flow, and the wheel lists every
package."""

import ast
from pathlib import Path

import tomllib

from conftest import REPO

SRC = REPO / "src" / "dlrm_exp"

#: The rooms from the top of the flow to the bottom. A module may import its own room and the
#: rooms below it, never one above (entry -> modes -> build -> loop -> record, with the rooms
#: they stand on below them).
LAYERS = [
    {"cli", "__main__", "report"},  # entry points
    {"bench"},
    {"modes"},
    {"build"},
    {"planning"},
    {"loop"},
    {"perf"},
    {"distributed"},
    {"data"},
    {"record"},
    {"config"},
    {"util", "errors", "__init__"},
]


def _room(module: str) -> str:
    """``dlrm_exp.planning.job`` -> ``planning``; ``dlrm_exp.cli`` -> ``cli``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _level(room: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if room in layer)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (SRC / relative).with_suffix(".py").is_file() or (SRC / relative).is_dir()


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    strings = [  # modules named by string for lazy import (the mode registry)
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("dlrm_exp.")
        and _is_module(node.value)
    ]
    return [m for m in found + strings if m.startswith("dlrm_exp.")]


def test_every_room_has_a_layer_and_a_docstring_saying_what_it_may_import():
    rooms = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert rooms <= set().union(*LAYERS)
    for room in rooms:
        doc = ast.get_docstring(ast.parse((SRC / room / "__init__.py").read_text())) or ""
        assert "Owns:" in doc and "May import:" in doc, room


def test_no_module_imports_a_room_above_its_own():
    upward = []
    for path in SRC.rglob("*.py"):
        module = _module_name(path)
        own = _level(_room(module))
        for imported in _imports(path):
            if _level(_room(imported)) < own:
                upward.append(f"{module} imports {imported}")
    assert upward == []


def test_the_check_catches_an_upward_import(tmp_path):
    planted = SRC / "loop" / "_planted_upward_import.py"
    planted.write_text("from dlrm_exp.build.experiment import Experiment\n")
    try:
        imports = _imports(planted)
        assert _level(_room(imports[0])) < _level(_room(_module_name(planted)))
    finally:
        planted.unlink()


def test_the_wheel_lists_every_package_under_src():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    on_disk = {_module_name(p.parent / "__init__.py") for p in SRC.rglob("__init__.py")}
    assert listed - {"dlrm_exp.conf"} == on_disk
    assert pyproject["tool"]["setuptools"]["package-dir"]["dlrm_exp.conf"] == "conf"
