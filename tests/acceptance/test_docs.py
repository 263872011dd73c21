"""Every ```python block of docs/*.md (and README.md) runs; every `workhorse ...` shown parses.

Each page runs in its own Python process against a fresh database: WORKHORSE_DATABASE_URL is set
to the `database_url` fixture, and the page's blocks run in order in one namespace, so later blocks
use earlier names. A block fenced as ```python no-run is only compiled: keep that for the few that
need a running worker fleet. Tracebacks point at the Markdown file and line.

Shell blocks (bash, console, sh, shell) are not executed. Every `workhorse ...` command in them
must parse against the real CLI (arguments, options, durations), and `workhorse <verb> --help`
must exit 0.

Run a page by hand: `python tests/acceptance/test_docs.py docs/concepts.md` (with
WORKHORSE_DATABASE_URL set).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from workhorse.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").glob("*.md")) + [
    path for path in [REPO / "README.md"] if path.exists()
]
SHELL_LANGUAGES = {"bash", "console", "sh", "shell", "shell-session"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
# `workhorse` (or `.venv/bin/workhorse`) as a command: at the start of a line, after a shell
# operator or `$(`, or after a space (`sudo workhorse`, `env X=1 workhorse`).
_COMMAND = re.compile(
    r"(?:^|[;&|(`]\s*|\$\(\s*|\s)(?:[\w.~/-]*/)?workhorse(?=\s|$)(?P<rest>[^;&|)`#\n]*)"
)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the first line of code
    language: str
    flags: tuple[str, ...]
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, in order."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        fence = match["fence"]
        info = match["info"].strip().split()
        start = index + 1
        end = start
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        language = info[0].lower() if info else ""
        found.append(Block(path, start + 1, language, tuple(info[1:]), "\n".join(lines[start:end])))
        index = end + 1
    return found


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.language in ("python", "py")]


# ---- running one page (in a subprocess: `python test_docs.py PAGE`) ---------------------------


def run_page(path: Path) -> int:
    """Run the page's python blocks in one namespace; print where the first failure happened."""
    page = path.resolve()
    namespace: dict[str, object] = {"__name__": "docs_" + re.sub(r"\W", "_", page.stem)}
    ran = skipped = 0
    for block in python_blocks(page):
        # Pad with blank lines so that tracebacks carry the Markdown file's own line numbers.
        source = "\n" * (block.line - 1) + block.code
        try:
            code = compile(source, str(page), "exec")
        except SyntaxError:
            traceback.print_exc()
            print(f"FAILED to compile the block at {block.where}", file=sys.stderr)
            return 1
        if "no-run" in block.flags:
            skipped += 1
            continue
        try:
            exec(code, namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED in the block at {block.where}", file=sys.stderr)
            return 1
        ran += 1
    _close_apps(namespace)
    print(f"ran {ran} block(s), compiled {skipped} no-run block(s)")
    return 0


def _close_apps(namespace: dict[str, object]) -> None:
    from workhorse import App

    for value in namespace.values():
        if isinstance(value, App):
            value.close()


# ---- tests -------------------------------------------------------------------------------------


# Only the pages that have Python blocks: a page without any is no test (and no skip).
PYTHON_PAGES = [page for page in PAGES if python_blocks(page)]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[p.name for p in PYTHON_PAGES])
def test_python_blocks_run(
    page: Path, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    monkeypatch.delenv("WORKHORSE_HOME", raising=False)
    result = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(page)],
        cwd=tmp_path,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{page.name}:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip().splitlines()[-1].startswith("ran ")


_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
# Pages that the docs may point at before they are written (see benchmarks/).
PLACEHOLDERS = {REPO / "benchmarks" / "README.md"}


def _prose(path: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, in_code = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        elif not in_code:
            lines.append(line)
    return lines


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {
        re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in _prose(path)
        if line.startswith("#")
    }


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for match in _LINK.finditer("\n".join(_prose(page))):
        target = match["target"]
        if re.match(r"^[a-z]+:", target):
            continue  # an absolute URL
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        if path in PLACEHOLDERS:
            continue
        if not path.exists() or (path.suffix == ".md" and anchor and anchor not in _anchors(path)):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_no_run_blocks_are_few() -> None:
    """`no-run` is for blocks that need a running worker fleet; keep them rare."""
    every = [b for page in PAGES for b in python_blocks(page)]
    skipped = [b.where for b in every if "no-run" in b.flags]
    assert len(skipped) * 5 <= len(every), f"too many no-run blocks: {skipped}"


def shell_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for block in blocks(page):
            if block.language not in SHELL_LANGUAGES:
                continue
            text = block.code.replace("\\\n", " ")
            for line in text.splitlines():
                if block.language in ("console", "shell-session"):
                    if not line.startswith("$ "):
                        continue  # output, not a command
                    line = line[2:]
                for match in _COMMAND.finditer(line):
                    found.append((block.where, shlex.split(match["rest"])))
    return found


COMMANDS = shell_commands()


def test_docs_show_commands() -> None:
    assert len(COMMANDS) >= 10


def _verb_path(argv: list[str]) -> list[str]:
    """The command path in argv (`jobs retry`), skipping the global options."""
    path: list[str] = []
    group: click.Command = cli
    args = list(argv)
    while args and isinstance(group, click.Group):
        head = args.pop(0)
        if head == "--database-url":
            args = args[1:]
            continue
        if head.startswith("--database-url="):
            continue
        command = group.commands.get(head)
        if command is None:
            break
        path.append(head)
        group = command
    return path


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[" ".join(a) or "-" for _, a in COMMANDS])
def test_shell_command_parses(where: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def every_command(command: click.Command) -> list[click.Command]:
        found = [command]
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                found += every_command(sub)
        return found

    # Parse for real (types, durations, required arguments), but run nothing.
    for command in every_command(cli):
        monkeypatch.setattr(command, "callback", lambda *args, **kwargs: None)
    runner = CliRunner()
    result = runner.invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 0, f"{where}: `workhorse {shlex.join(argv)}`:\n{result.output}"

    monkeypatch.undo()
    path = _verb_path(argv)
    help_result = runner.invoke(cli, [*path, "--help"], catch_exceptions=False)
    assert help_result.exit_code == 0, f"{where}: `workhorse {' '.join(path)} --help`"


if __name__ == "__main__":
    sys.exit(run_page(Path(sys.argv[1])))
