"""The layout rules a newcomer relies on, checked on the source itself:
SQL text lives only under workhorse/sql/, no module reaches into another's private names, and no
Python file spells a versioned SQL name (only SQL files may: Python asks `_sql` for the name)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "workhorse"
# An identifier that ends in `_v` and a number: a versioned SQL name. The pattern is written in two
# pieces so that this file does not match itself.
VERSIONED_NAME = re.compile(r"\b_?[a-z][a-z0-9_]*" + r"_v\d+\b")
SQL_TEXT = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|VACUUM|LISTEN|NOTIFY|WITH|TRUNCATE)\s"
)


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def sql_literals(source: str) -> list[str]:
    """String constants (not docstrings) that read as SQL statements."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docs and SQL_TEXT.match(node.value)
    ]


def private_reaches(source: str) -> list[str]:
    """`from x import _name`, and `obj._name` on anything but self/cls."""
    found = []
    for node in ast.walk(ast.parse(source)):
        # `from . import _ops` imports a private module of the package: that is allowed.
        if isinstance(node, ast.ImportFrom) and node.module not in (None, "__future__"):
            found += [f"import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("_")
              and not node.attr.startswith("__")
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"._{node.attr[1:]} at line {node.lineno}")
    return found


# os._exit is the only way out of a forked child that must not run the parent's cleanup; `_name_`
# and `_value_` are the Enum attributes a pseudo-member (a status this version does not know) sets.
PUBLIC_UNDERSCORED = {"._exit", "._name_", "._value_"}


def test_sql_text_lives_only_under_workhorse_sql() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): found
        for path in _modules()
        if (found := sql_literals(path.read_text("utf-8")))
    }
    assert offenders == {}


def test_no_module_reaches_into_private_names() -> None:
    offenders = {}
    for path in _modules():
        name = str(path.relative_to(PACKAGE))
        found = [f for f in private_reaches(path.read_text("utf-8"))
                 if f.split(" at ")[0] not in PUBLIC_UNDERSCORED]
        if found:
            offenders[name] = found
    assert offenders == {}


def test_the_layout_checks_can_fail() -> None:
    bad = (
        'from .queue import _job_from_row\n'
        'rows = conn.execute("SELECT 1 FROM workhorse.jobs")\n'
        'channels._ends = {}\n'
    )
    assert sql_literals(bad) == ["SELECT 1 FROM workhorse.jobs"]
    assert private_reaches(bad) == ["import _job_from_row", "._ends at line 3"]


def versioned_names(source: str) -> list[str]:
    return VERSIONED_NAME.findall(source)


def test_no_python_file_spells_a_versioned_sql_name() -> None:
    offenders = {}
    for folder in ("workhorse", "tests", "benchmarks", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" in path.parts:
                continue
            if found := versioned_names(path.read_text("utf-8")):
                offenders[str(path.relative_to(ROOT))] = sorted(set(found))
    assert offenders == {}


def test_the_version_check_can_fail() -> None:
    bad = 'rows = conn.execute(f"SELECT * FROM workhorse.{name}")  # see ' + "claim" + "_v5.sql"
    assert versioned_names(bad) == ["claim" + "_v5"]
    assert versioned_names("workhorse._limits" + "_v12(q)") == ["_limits" + "_v12"]
    assert versioned_names("a v2 release, version_v, pg_v") == []


def test_every_sql_folder_ships_in_the_wheel() -> None:
    """pyproject.toml's package data names every folder of workhorse/sql/ that holds .sql files:
    a folder left out would be missing from a built wheel, and install_schema() would fail there
    though every test of a source checkout passes."""
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["workhorse"]
    shipped = {Path(glob).parent.as_posix() for glob in globs if glob.endswith(".sql")}
    folders = {path.parent.relative_to(PACKAGE).as_posix()
               for path in (PACKAGE / "sql").rglob("*.sql")}
    released = {folder for folder in folders if folder.startswith("sql/released/")}
    assert "sql/released/*" in shipped and released, "the released bodies must ship"
    missing = sorted(folders - released - shipped)
    assert missing == [], f"not in pyproject.toml's package-data: {missing}"
