"""What a release shipped never changes (docs/design.md "Releases and SQL versioning"):
`workhorse/sql/released.json` holds, for each release, the sha256 of every migration, function
and statement file it shipped, and of every migration's text as a database records it (`applied/`:
with its function files applied in place, `_sql.checksum`); each must still be found with that
hash. A released function changes only as a new version beside it; a file not yet released may
change.

Where a recorded file is found now:
* `functions/NAME.sql` (0.2.0's flat folder): the function file NAME, wherever it lives now (a
  subsystem's folder, or `released/0.2.0/` once only 0.2.0's workers call it);
* `statements/NAME.sql`: the release's statements are test fixtures
  (tests/fixtures/released/<release>/statements/: every statement its wheel sends), since this
  wheel edits its own in place;
* `migrations/NNNN_name.sql`: the file, its `\\ir` lines pointing where the release's own layout
  had its function files (they may move; what they apply may not change, which `applied/` checks).

Recording a release (once, when its version is tagged in CHANGELOG.md):

    .venv/bin/python tests/unit/test_released_files.py 0.3.0
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import sys
from pathlib import Path

from workhorse import _sql

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "workhorse" / "sql" / "released.json"
FIXTURES = ROOT / "tests" / "fixtures" / "released"
# The digest a 0.2.0 database recorded for its one migration: the baseline's text with its
# function files applied in place. Checked here against the package's text today.
BASELINE_APPLIED_0_2_0 = "0db14dedc0ba669d61ac8d6b24636edcf979fa7a65655092e51692bfc729408d"

_INCLUDE = re.compile(r"^(\\ir\s+)(\S+)(\s*)$", re.MULTILINE)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def changed(released: dict[str, dict[str, str]], files: dict[str, bytes]) -> list[str]:
    """Every recorded file that is gone or whose hash differs, as `release: path (what)`."""
    found = []
    for release, recorded in released.items():
        for path, sha in sorted(recorded.items()):
            if path not in files:
                found.append(f"{release}: {path} (deleted)")
            elif digest(files[path]) != sha:
                found.append(f"{release}: {path} (changed)")
    return found


def _flat_includes(text: bytes) -> bytes:
    """A migration's `\\ir` lines as 0.2.0's flat layout had them (`../functions/NAME.sql`)."""
    return _INCLUDE.sub(
        lambda m: f"{m.group(1)}../functions/{posixpath.basename(m.group(2))}{m.group(3)}",
        text.decode("utf-8")).encode("utf-8")


def shipped(release: str, recorded: dict[str, str],
            files: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """The package's files (`files`, default `_sql.files()`), under the paths `release`
    recorded them by (see the module's docstring)."""
    files = dict(_sql.files()) if files is None else dict(files)
    flat = any(path.startswith("functions/") for path in recorded)
    found: dict[str, bytes] = {}
    for path, data in files.items():
        folder = path.split("/", 1)[0]
        if folder == "migrations":
            found[path] = _flat_includes(data) if flat else data
            expanded = _sql._expand(data.decode("utf-8"), "migrations")
            found[f"applied/{posixpath.basename(path)}"] = expanded.encode("utf-8")
        elif folder == "statements":
            found[path] = data
        else:  # a function file
            found[f"functions/{posixpath.basename(path)}" if flat else path] = data
    kept = FIXTURES / release / "statements"
    if kept.is_dir():
        found = {path: data for path, data in found.items() if not path.startswith("statements/")}
        for fixture in kept.glob("*.sql"):
            found[f"statements/{fixture.name}"] = fixture.read_bytes()
    return found


def test_no_released_file_changed_or_disappeared() -> None:
    offenders = [line for release, recorded in _sql.released().items()
                 for line in changed({release: recorded}, shipped(release, recorded))]
    assert offenders == [], (
        "released SQL files never change: add a new version beside the old one (and a new "
        f"migration) instead: {offenders}")


def test_a_0_2_0_database_still_matches_the_baseline() -> None:
    """The checksum a 0.2.0 database recorded for 0001 is the package's today: moving the
    function files changed the `\\ir` lines, never the text they apply."""
    [(_, name, text)] = [m for m in _sql.migrations() if m[0] == 1]
    assert _sql.checksum(text) == BASELINE_APPLIED_0_2_0
    assert _sql.released()["0.2.0"][f"applied/{name}"] == BASELINE_APPLIED_0_2_0


def test_the_check_sees_a_changed_a_moved_and_a_deleted_released_body() -> None:
    """The broken variants: a released body edited (wherever it lives now), one deleted, the
    baseline's text edited, and one of 0.2.0's statement fixtures gone, each reported; a function
    file that only moved to another folder is not."""
    recorded = _sql.released()["0.2.0"]
    files = dict(_sql.files())
    assert changed({"0.2.0": recorded}, shipped("0.2.0", recorded, files)) == []

    paths = _sql.function_paths()
    claimed_by_0_2_0 = (FIXTURES / "0.2.0" / "statements" / "claim.sql").read_text("utf-8")
    old_claim = re.findall(r"workhorse\.(\w+)\(", claimed_by_0_2_0)[0]
    old_claim_path = paths[old_claim]  # 0.2.0's claim, now in sql/released/0.2.0/
    wake_name = _sql.function_name("_wake")
    wake = paths[wake_name]  # shipped by 0.2.0, still live
    baseline = "migrations/0001_baseline.sql"
    assert old_claim_path.startswith("released/0.2.0/") and _sql.is_live(wake)

    moved = dict(files)
    moved[f"housekeeping/{posixpath.basename(wake)}"] = moved.pop(wake)
    assert changed({"0.2.0": recorded}, shipped("0.2.0", recorded, moved)) == []

    broken = dict(files)
    broken[old_claim_path] = broken[old_claim_path] + b"\n-- an edit"
    del broken[wake]
    broken[baseline] = broken[baseline].replace(b"the first release", b"the 1st release", 1)
    assert broken[baseline] != files[baseline]
    found = shipped("0.2.0", recorded, broken)
    del found["statements/claim.sql"]
    assert changed({"0.2.0": recorded}, found) == [
        "0.2.0: applied/0001_baseline.sql (changed)",
        f"0.2.0: functions/{wake_name}.sql (deleted)",
        f"0.2.0: functions/{old_claim}.sql (changed)",
        f"0.2.0: {baseline} (changed)",
        "0.2.0: statements/claim.sql (deleted)",
    ]


def test_the_fixtures_are_every_statement_0_2_0_shipped() -> None:
    recorded = {path for path in _sql.released()["0.2.0"] if path.startswith("statements/")}
    fixtures = {f"statements/{p.name}" for p in (FIXTURES / "0.2.0" / "statements").glob("*.sql")}
    assert fixtures == recorded


def test_every_release_in_the_changelog_is_recorded_and_the_package_version_is_the_newest(
) -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text("utf-8")
    tagged = re.findall(r"^## (\d+\.\d+\.\d+)", changelog, re.MULTILINE)
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text("utf-8"),
                        re.MULTILINE)
    assert version is not None
    released = _sql.released()
    assert tagged and tagged[0] == version.group(1), "CHANGELOG's newest section is the version"
    assert set(released) <= set(tagged)
    assert version.group(1) in released, f"{version.group(1)} is tagged but not recorded"


def test_a_release_records_every_file_it_shipped() -> None:
    """Each release's record names files of its own layout: migrations, functions, statements
    and the migrations as applied."""
    folders = ("migrations/", "statements/", "applied/", "functions/", "released/",
               *(f"{folder}/" for folder in _sql.SUBSYSTEMS))
    for release, recorded in _sql.released().items():
        assert all(path.startswith(folders) for path in recorded), release
        assert any(path.startswith("applied/") for path in recorded), release


def record(version: str) -> None:
    released = json.loads(MANIFEST.read_text("utf-8")) if MANIFEST.exists() else {}
    if version in released:
        raise SystemExit(f"{version} is already recorded")
    files = dict(_sql.files())
    entry = {path: digest(data) for path, data in files.items()}
    for _, name, text in _sql.migrations():
        entry[f"applied/{name}"] = _sql.checksum(text)
    released[version] = dict(sorted(entry.items()))
    MANIFEST.write_text(json.dumps(released, indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"recorded {len(entry)} files for {version} in {MANIFEST}; copy its statements to "
          f"{FIXTURES / version / 'statements'} before the next release edits them")


if __name__ == "__main__":
    record(sys.argv[1])
