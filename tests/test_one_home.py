"""Issue 35, item 5: one home per kind of thing, checked on the package's source so that no second copy grows back."""

from __future__ import annotations

import ast
import builtins

from tests.conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "src" / "compute_budget"


# The CLI's exits are Click's exceptions, which errors.py cannot hold without loading Click into the pure core; and
# SIGTERM is raised as an interrupt, not an error.
_EXCEPTIONS_OUTSIDE_ERRORS = {
    "cli/program.py": {"CannotRun", "Terminated"},
    "cli/audit/reports.py": {"ReportsNotWritten"},
}


def _exception_classes() -> dict[str, set[str]]:
    """The public exception classes each module of the package defines (by base name, followed to a fixpoint)."""
    classes = {
        path.relative_to(PACKAGE).as_posix(): [
            (node.name, {ast.unparse(base).rpartition(".")[2] for base in node.bases})
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.ClassDef)
        ]
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    known = {
        name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
    }
    known.add("ClickException")
    while True:
        grown = known | {name for found in classes.values() for name, bases in found if bases & known}
        if grown == known:
            break
        known = grown
    return {
        module: {name for name, _ in found if name in known and not name.startswith("_")}
        for module, found in classes.items()
    }


def test_every_public_exception_class_is_defined_in_errors() -> None:
    """Issue 35: one home per kind of thing. A module's private control-flow signals may stay beside their use."""
    found = {module: names for module, names in _exception_classes().items() if names and module != "errors.py"}
    assert found == _EXCEPTIONS_OUTSIDE_ERRORS
    assert len(_exception_classes()["errors.py"]) > 40  # the check reads what it should


def _strict_base64_decoders(source: str) -> int:
    """How many `b64decode(..., validate=True)` calls (a strict decoder of its own) `source` makes."""
    return sum(
        1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).endswith("b64decode")
        and any(keyword.arg == "validate" for keyword in node.keywords)
    )


def test_one_strict_base64_decoder() -> None:
    """Issue 35: canonical base64 is read by `core.log.encoding.strict_b64decode` alone, everywhere it is read."""
    found = {
        path.relative_to(PACKAGE).as_posix(): count
        for path in sorted(PACKAGE.rglob("*.py"))
        if (count := _strict_base64_decoders(path.read_text(encoding="utf-8")))
    }
    assert found == {"core/log/encoding.py": 1}
