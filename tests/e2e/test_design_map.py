"""docs/design.md's map of the code cannot drift: it names every module of src/compute_budget, and only those."""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT

DESIGN = REPO_ROOT / "docs" / "design.md"
PACKAGE = REPO_ROOT / "src" / "compute_budget"
MAP_HEADING = "## The map of the code"


def mapped_modules(text: str) -> list[str]:
    """The module of each table row of the map section of `text` (its first cell, a `path.py` in backquotes)."""
    start = text.index(f"\n{MAP_HEADING}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else None]
    return re.findall(r"^\| `([^`|]+\.py)` \|", section, flags=re.MULTILINE)


def package_modules() -> set[str]:
    """Every .py file under src/compute_budget, as a path relative to it."""
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")}


def test_the_design_map_names_every_module_and_only_those() -> None:
    """A module added without a line in the map, or a line left behind by a module moved or removed, fails here:
    the map is the newcomer's table of contents, and an outdated one misleads."""
    mapped = mapped_modules(DESIGN.read_text(encoding="utf-8"))
    assert sorted(set(package_modules()) - set(mapped)) == [], "modules missing from the map of docs/design.md"
    assert sorted(set(mapped) - package_modules()) == [], "the map of docs/design.md names modules that do not exist"
    assert len(mapped) == len(set(mapped)), "a module is named twice in the map of docs/design.md"


def test_the_map_reader_sees_rows_and_only_rows() -> None:
    """The check above is not vacuous: a table row is read, a mention in prose or a header row is not."""
    text = (
        "# D\n\n## The map of the code\n\n| module | what it is |\n|---|---|\n| `store/facade.py` | the facade |\n"
        "prose naming `store/ghost.py` is no row\n\n## Next\n\n| `cli/later.py` | outside the section |\n"
    )
    assert mapped_modules(text) == ["store/facade.py"]
    assert "store/facade.py" in package_modules()
