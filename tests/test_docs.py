"""The documentation holds: relative links resolve, the architecture page names every module,
and the README stays short (topics live in docs/, measured numbers in docs/results.md)."""

import re
from pathlib import Path

from conftest import REPO

SRC = REPO / "src" / "dlrm_exp"
DOCS = REPO / "docs"
README = REPO / "README.md"
#: The README is a front page: what, two commands, a few examples, links.
README_MAX_LINES = 220

#: ``[text](target)``; images (``![alt](target)``) match too, which is what we want.
_LINK = re.compile(r"\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_EXTERNAL = ("http://", "https://", "mailto:")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _links(text: str) -> list[str]:
    """Link targets outside fenced code blocks (code may hold ``[x](y)`` that is not a link)."""
    return _LINK.findall(_FENCE.sub("", text))


def _module_names() -> list[str]:
    """``src/dlrm_exp/record/runs.py`` -> ``dlrm_exp.record.runs``; ``__init__.py`` -> package."""
    names = []
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def _names(text: str, name: str) -> bool:
    """``name`` as a whole dotted name (``dlrm_exp.data`` is not found in
    ``dlrm_exp.data.batches``)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\.?\w)", text) is not None


def test_the_pages_exist():
    assert README.is_file()
    assert (DOCS / "architecture.md").is_file()
    assert (DOCS / "results.md").is_file()


def test_every_relative_link_resolves():
    broken = []
    for page in _pages():
        for target in _links(page.read_text()):
            if target.startswith(_EXTERNAL) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == [], "broken relative links:\n" + "\n".join(broken)


def test_the_readme_links_every_docs_page():
    linked = {
        (README.parent / target.split("#", 1)[0]).resolve()
        for target in _links(README.read_text())
        if not target.startswith(_EXTERNAL) and not target.startswith("#")
    }
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert unlinked == [], "docs pages the README does not link: " + ", ".join(unlinked)


def test_the_architecture_page_names_every_module():
    text = (DOCS / "architecture.md").read_text()
    missing = [name for name in _module_names() if not _names(text, name)]
    assert missing == [], "modules docs/architecture.md does not name: " + ", ".join(missing)


def test_the_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move topics to docs/"
    )
