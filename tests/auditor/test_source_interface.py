"""One source interface for the audit: the auditor imports no concrete source, every source answers the whole log
view (no stubs), and only a database has health checks."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from compute_budget.auditor.source import AuditSource, DatabaseHealth, LogView, SourceLocation
from compute_budget.publication_reader.snapshot import (
    Publication,
    PublicationLocation,
    PublicationSnapshot,
    PublicationTarget,
)
from compute_budget.store.facade import BudgetStore
from compute_budget.store.location import Location
from compute_budget.store.snapshot import Snapshot

AUDITOR = Path(__file__).resolve().parents[2] / "src" / "compute_budget" / "auditor"
CONCRETE = ("compute_budget.store", "compute_budget.publication_reader", "compute_budget.publication_writer")


def _imports(path: Path) -> list[str]:
    """Every module `path` imports, at any depth of its code (a function's lazy import included)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return found


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} - {"display"}


def test_no_auditor_module_imports_a_concrete_source() -> None:
    modules = sorted(AUDITOR.glob("*.py"))
    assert len(modules) > 10  # not vacuous
    offending = [
        f"{path.name}: {name}"
        for path in modules
        for name in _imports(path)
        if name in CONCRETE or name.startswith(tuple(f"{prefix}." for prefix in CONCRETE))
    ]
    assert offending == []


def test_the_rule_catches_a_concrete_import(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from compute_budget.store import BudgetStore\n    return BudgetStore\n")
    assert "compute_budget.store" in _imports(planted)


def test_every_source_answers_the_whole_log_view_and_only_a_database_has_health() -> None:
    for view in (Snapshot, PublicationSnapshot):
        assert _members(LogView) <= set(dir(view)), view
        # a method of the view is the view's own, written for it: none is a stub inherited or left out
        for name in _members(LogView):
            assert inspect.getdoc(getattr(view, name)), (view, name)
    assert _members(DatabaseHealth) <= set(dir(Snapshot))
    assert not _members(DatabaseHealth) & set(dir(PublicationSnapshot))  # a publication stubs none of them
    for source in (BudgetStore, Publication):  # `location` is an attribute of a store's instance
        assert _members(AuditSource) - {"location"} <= set(dir(source)), source
    for location in (Location, PublicationLocation, PublicationTarget):  # `display` may be a dataclass field
        fields = set(getattr(location, "__dataclass_fields__", {}))
        assert _members(SourceLocation) | {"display"} <= set(dir(location)) | fields, location
