"""What a release shipped never changes (docs/design.md "Releases and SQL versioning"):
`workhorse/sql/released.json` holds, for each release, the sha256 of every migration, function
and statement file it shipped, and each of those files must still exist with that hash. A
released function changes only as a new version beside it; a file not yet released may change.

Recording a release (once, when its version is tagged in CHANGELOG.md):

    .venv/bin/python tests/unit/test_released_files.py 0.3.0
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

from workhorse import _sql

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "workhorse" / "sql" / "released.json"


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


def shipped(release: str) -> dict[str, bytes]:
    """The files as `release` shipped them: the package's, with the statements that only its
    wheel sends read from the compatibility tests' fixtures (this wheel edits its own in place)."""
    files = dict(_sql.files())
    kept = ROOT / "tests" / "fixtures" / "released" / release / "statements"
    for path in kept.glob("*.sql"):
        files[f"statements/{path.name}"] = path.read_bytes()
    return files


def test_no_released_file_changed_or_disappeared() -> None:
    offenders = [line for release, recorded in _sql.released().items()
                 for line in changed({release: recorded}, shipped(release))]
    assert offenders == [], (
        "released SQL files never change: add a new version beside the old one (and a new "
        "migration) instead")


def test_the_check_sees_a_changed_and_a_deleted_file() -> None:
    files = dict(_sql.files())
    released = {"0.2.0": {path: digest(data) for path, data in files.items()}}
    assert changed(released, files) == []
    claim = f"functions/{_sql.function_name('claim')}.sql"
    files[claim] = files[claim] + b"\n-- an edit"
    del files["statements/claim.sql"]
    assert changed(released, files) == [
        f"0.2.0: {claim} (changed)", "0.2.0: statements/claim.sql (deleted)"]


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
    """The newest release lists every file the package has now, unless newer ones were added
    after it (those are unreleased and may change)."""
    released = _sql.released()
    newest = max(released, key=lambda v: tuple(int(part) for part in v.split(".")))
    shipped = set(released[newest])
    assert shipped <= set(_sql.files())
    assert all(path.startswith(("migrations/", "functions/", "statements/")) for path in shipped)


def record(version: str) -> None:
    released = json.loads(MANIFEST.read_text("utf-8")) if MANIFEST.exists() else {}
    if version in released:
        raise SystemExit(f"{version} is already recorded")
    released[version] = {path: digest(data) for path, data in sorted(_sql.files().items())}
    MANIFEST.write_text(json.dumps(released, indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"recorded {len(released[version])} files for {version} in {MANIFEST}")


if __name__ == "__main__":
    record(sys.argv[1])
