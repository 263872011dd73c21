"""The snippets of docs/deployment.md that can run here: the systemd unit passes
`systemd-analyze verify`, and the Dockerfile builds (where a docker daemon answers). The health
check command is run against a live worker in test_connection_budget.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

# Not about the database server: one CI pass is enough.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deployment.md"


def snippet(language: str, marker: str) -> str:
    """The fenced `language` block of the doc whose first line contains `marker`."""
    for block in re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.DOTALL):
        if marker in block.splitlines()[0]:
            return str(block)
    raise AssertionError(f"no {language} block with {marker!r} in {DOC}")


def healthcheck_command() -> str:
    line = next(line for line in snippet("dockerfile", "Dockerfile").splitlines()
                if line.startswith("HEALTHCHECK"))
    return line.split(" CMD ", 1)[1]


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = snippet("ini", "workhorse@.service")
    # The unit's paths must exist for verify: point them at this machine's.
    workhorse = shutil.which("workhorse") or str(Path(__import__("sys").executable).parent
                                                 / "workhorse")
    unit = (unit.replace("/srv/app/.venv/bin/workhorse", workhorse)
            .replace("WorkingDirectory=/srv/app", f"WorkingDirectory={tmp_path}")
            .replace("User=workhorse", "User=root").replace("Group=workhorse", "Group=root"))
    path = tmp_path / "workhorse@.service"
    path.write_text(unit)
    instance = tmp_path / "workhorse@1.service"
    instance.symlink_to(path)
    result = subprocess.run([analyze, "verify", str(instance)], capture_output=True, text=True,
                            timeout=60)
    problems = [line for line in (result.stdout + result.stderr).splitlines()
                if str(tmp_path) in line or "workhorse@" in line]
    assert result.returncode == 0 and not problems, result.stdout + result.stderr


def test_the_dockerfile_builds(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker is not installed")
    info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=30)
    if info.returncode != 0:
        pytest.skip(f"no docker daemon: {(info.stderr or info.stdout).strip().splitlines()[-1]}")
    context = tmp_path / "context"
    shutil.copytree(ROOT, context, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache"))
    (context / "tasks.py").write_text("import workhorse\napp = workhorse.App('docker')\n")
    (context / "Dockerfile").write_text(snippet("dockerfile", "Dockerfile"))
    result = subprocess.run([docker, "build", "-t", "workhorse-doc-test", str(context)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
