"""SQL by lifecycle (docs/design.md "Releases and SQL versioning"): every SQL file is there
because something sends or calls it, and live code calls only live code.

* Live: what this wheel's statements (sql/statements/, sql/demo/) and the schema's triggers call,
  directly or not. It lives in one folder per subsystem (`_sql.SUBSYSTEMS`).
* Supported: what the previous release's statements call (tests/fixtures/released/<release>/:
  its workers still run beside this one). A body only they reach lives in sql/released/<release>/.
* A live function never calls an older version of a function, nor any released body: a fix to a
  helper then reaches every live caller, and a released body can be dropped one release later.

Each rule is a function of a file set, so that its test can also run it on a broken variant.
"""

from __future__ import annotations

import re
from pathlib import Path

from workhorse import _sql

ROOT = Path(__file__).resolve().parents[2]
SUPPORTED = ROOT / "tests" / "fixtures" / "released" / "0.2.0" / "statements"
_CALL = re.compile(r"\bworkhorse\.(\w+)\s*\(")
_DEFINES = re.compile(r"CREATE FUNCTION workhorse\.(\w+)\(")
_VERSIONED = re.compile(r"^(\w+)_v(\d+)$")


def calls(text: str) -> list[str]:
    """The workhorse functions `text` calls (a function file: not itself), in order."""
    defined = set(_DEFINES.findall(text))
    return [name for name in dict.fromkeys(_CALL.findall(text)) if name not in defined]


def reachable(functions: dict[str, str], roots: list[str]) -> set[str]:
    """Every function file the texts `roots` call, directly or through other functions."""
    seen: set[str] = set()
    todo = [name for text in roots for name in calls(text)]
    while todo:
        name = todo.pop()
        if name in functions and name not in seen:
            seen.add(name)
            todo += calls(functions[name])
    return seen


def _live_roots() -> list[str]:
    """The statements this wheel sends, and the migrations (their triggers call functions)."""
    files = _sql.files()
    roots = [data.decode("utf-8") for path, data in files.items()
             if path.startswith(("statements/", "migrations/"))]
    demo = ROOT / "workhorse" / "sql" / "demo"
    return roots + [path.read_text("utf-8") for path in demo.glob("*.sql")]


def _supported_roots() -> list[str]:
    return [path.read_text("utf-8") for path in SUPPORTED.glob("*.sql")]


# ---- statements ----------------------------------------------------------------------------------

def unsent_statements(statements: list[str], python: str) -> list[str]:
    """The statement names no Python source names (as a string literal: `_sql.statement("x")`,
    or a name chosen among literals, as the dashboard's window statements are)."""
    return [name for name in sorted(statements)
            if not re.search(rf"""["']{re.escape(name)}["']""", python)]


def _python_sources() -> str:
    return "\n".join(path.read_text("utf-8") for path in (ROOT / "workhorse").rglob("*.py"))


def _statement_names() -> list[str]:
    sql = ROOT / "workhorse" / "sql"
    return [path.stem for folder in ("statements", "demo") for path in (sql / folder).glob("*.sql")]


def test_every_statement_file_is_sent_by_some_python_code() -> None:
    assert unsent_statements(_statement_names(), _python_sources()) == []


def test_the_statement_check_sees_a_file_nothing_sends() -> None:
    python = _python_sources()
    assert unsent_statements([*_statement_names(), "claim_by_hand"], python) == ["claim_by_hand"]


# ---- functions: called by something live or supported -----------------------------------------

def uncalled_functions(paths: dict[str, str], texts: dict[str, str], live_roots: list[str],
                       supported_roots: list[str]) -> list[str]:
    """Function files that nothing live or supported calls, and live-folder files that nothing
    live calls (only an older release's workers do: they belong in sql/released/)."""
    live = reachable(texts, live_roots)
    supported = reachable(texts, supported_roots)
    found = [f"{paths[name]} (nothing calls it)" for name in sorted(texts)
             if name not in live | supported]
    found += [f"{paths[name]} (only an older release calls it: move it to released/)"
              for name in sorted(texts)
              if name in supported - live and _sql.is_live(paths[name])]
    return found


def test_every_function_is_called_by_live_or_supported_code() -> None:
    paths = _sql.function_paths()
    assert uncalled_functions(paths, _sql.function_files(), _live_roots(),
                              _supported_roots()) == []


def test_the_call_check_sees_an_orphan_and_a_stranded_released_body() -> None:
    paths = dict(_sql.function_paths())
    texts = dict(_sql.function_files())
    orphan = "_orphan_v" + "1"
    paths[orphan] = f"claim/{orphan}.sql"
    texts[orphan] = f"CREATE FUNCTION workhorse.{orphan}() RETURNS void ..."
    # 0.2.0's claim put back among the live files.
    old_claim = calls((SUPPORTED / "claim.sql").read_text("utf-8"))[0]
    paths[old_claim] = f"claim/{old_claim}.sql"
    assert uncalled_functions(paths, texts, _live_roots(), _supported_roots()) == [
        f"claim/{orphan}.sql (nothing calls it)",
        f"claim/{old_claim}.sql (only an older release calls it: move it to released/)",
    ]


# ---- live code calls only live code, of the newest version --------------------------------------

def stale_calls(paths: dict[str, str], texts: dict[str, str]) -> list[str]:
    """Each call from a live function to a released body, or to a version older than the newest
    file of that function."""
    newest: dict[str, int] = {}
    for name in texts:
        if m := _VERSIONED.match(name):
            newest[m.group(1)] = max(newest.get(m.group(1), 0), int(m.group(2)))
    found = []
    for name in sorted(texts):
        if not _sql.is_live(paths[name]):
            continue
        for called in calls(texts[name]):
            m = _VERSIONED.match(called)
            if called in paths and not _sql.is_live(paths[called]):
                found.append(f"{name} calls {called}, a released body ({paths[called]})")
            elif m and int(m.group(2)) < newest.get(m.group(1), 0):
                found.append(f"{name} calls {called}, older than "
                             f"{m.group(1)}_v{newest[m.group(1)]}")
    return found


def test_a_live_function_calls_only_the_newest_live_versions() -> None:
    assert stale_calls(_sql.function_paths(), _sql.function_files()) == []


def test_the_version_check_sees_an_older_call_and_a_released_call() -> None:
    """The broken variants: today's claim calling the helper 0.2.0's claim called (a released
    body), and a live helper with a newer version beside it that a caller did not move to."""
    paths = dict(_sql.function_paths())
    texts = dict(_sql.function_files())
    claim = _sql.function_name("claim")
    prepare = _sql.function_name("_prepare_queue")
    older = f"_prepare_queue_v{int(prepare.rsplit('_v', 1)[1]) - 1}"
    assert older in texts and not _sql.is_live(paths[older])
    texts[claim] = texts[claim].replace(f"workhorse.{prepare}(", f"workhorse.{older}(")
    assert stale_calls(paths, texts) == [
        f"{claim} calls {older}, a released body ({paths[older]})"]

    texts = dict(_sql.function_files())
    wake = _sql.function_name("_wake")
    newer = f"_wake_v{int(wake.rsplit('_v', 1)[1]) + 1}"
    texts[newer] = f"CREATE FUNCTION workhorse.{newer}(p_queue text) ..."
    paths[newer] = f"claim/{newer}.sql"
    found = stale_calls(paths, texts)
    assert f"{claim} calls {wake}, older than {newer}" in found
    assert all(line.endswith(f"older than {newer}") for line in found)


# ---- the claim's folder --------------------------------------------------------------------------

def test_the_claim_folder_holds_the_claim_and_every_helper_it_calls() -> None:
    """A newcomer reads one folder: sql/claim/ holds claim_vN and everything it calls."""
    paths = _sql.function_paths()
    claim = _sql.function_name("claim")
    needed = reachable(_sql.function_files(), [f"workhorse.{claim}("])
    assert {name: paths[name] for name in needed if not paths[name].startswith("claim/")} == {}
