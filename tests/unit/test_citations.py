"""The contract lives in the repository (docs/design.md "Releases and SQL versioning"), and what
cites it must name something it says.

- A heading citation is the contract's path followed by a heading in double quotes (a comma may
  follow the path) in code, tests, docs, benchmarks, examples, README.md or CHANGELOG.md. It
  must name a heading of
  docs/design.md by the rule the page states under its title: case aside, the citation is the
  heading, or the heading's text before its first parenthesis or colon, or `start ... end` of it.
  A citation may wrap across lines of a comment: the line break, the indentation and a comment
  marker (`#`, `--`) become one space.
- "invariant N", "invariants N and M", "invariants N-M" (or "N to M") name only invariants that
  docs/design.md states, each under a heading `### Invariant N: ...`.
- No file of the repository cites a document outside it (the shared contract, admission or style
  notes it was specified from, or the folder they sat in). The one exception is a SQL body some
  release shipped, recorded by hash in workhorse/sql/released.json: it can never change.

Each check is a function of in-memory text, so that the tests below show it failing on a broken
variant as well as passing on the repository.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
DOC = "docs/" + "design.md"  # spelled in two parts so that this file cites nothing itself
CITING_ROOTS = ("workhorse", "tests", "docs", "benchmarks", "examples", "README.md", "CHANGELOG.md")
TEXT_SUFFIXES = {".py", ".sql", ".md", ".html", ".js", ".css", ".toml", ".txt", ".json", ".cfg",
                 ".ini", ".yml", ".yaml", ".sh", ".service", ".j2", ".rst", ""}
SKIPPED_DIRS = {"__pycache__", "node_modules", "build", "dist"}

# A line break inside a citation, with the next line's indentation and comment marker.
_WRAP = re.compile(r"[ \t]*\r?\n[ \t]*(?:#+|--|\*)?[ \t]*")
_HEADING = re.compile(r"^(?P<marks>#{1,6})\s+(?P<text>.+?)\s*#*\s*$")
_INVARIANT_HEADING = re.compile(r"^invariant (?P<number>\d+):", re.IGNORECASE)
_GAP = r"(?:[ \t]*\r?\n[ \t]*(?:#+|--|\*)?[ \t]*|[ \t]+)"  # spaces, or a wrap as above
_CITATION = re.compile(re.escape(DOC) + rf",?{_GAP}+\"(?P<heading>[^\"]+)\"")
_INVARIANT_REF = re.compile(
    rf"\binvariants?{_GAP}+(?P<list>\d+(?:{_GAP}*(?:,|-|\u2013|\bto\b|\band\b){_GAP}*\d+)*)",
    re.IGNORECASE,
)
_OUTSIDE = re.compile(
    r"(?<![\w/.-])(?:DESIGN|ADMISSION|STYLE)\.md\b|\.\./shared\b|/work/" + "shared\\b"
)


# ---- reading ------------------------------------------------------------------------------------


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", _WRAP.sub(" ", text)).strip()


def headings(markdown: str) -> list[str]:
    """The page's headings (outside fenced code), as written."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = _HEADING.match(line)
        if match and not fenced:
            found.append(match["text"])
    return found


def citations(text: str) -> Iterator[tuple[int, str]]:
    """(line, cited heading) for every heading citation of the contract in `text`."""
    for match in _CITATION.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, _normalize(match["heading"])


def names_a_heading(citation: str, page_headings: Iterable[str]) -> bool:
    """The rule docs/design.md states: equal to a heading, or to the heading's text before its
    first parenthesis or colon, or `start ... end` of one; case and inline code marks aside."""
    wanted = citation.strip().lower()
    for heading in page_headings:
        full = heading.replace("`", "").strip().lower()
        short = re.split(r"\s*[(:]", full, maxsplit=1)[0].strip()
        if wanted in (full, short):
            return True
        if "..." in wanted:
            start, _, end = wanted.partition("...")
            if full.startswith(start.strip()) and full.endswith(end.strip()):
                return True
    return False


def stated_invariants(markdown: str) -> set[int]:
    return {int(m["number"]) for h in headings(markdown) if (m := _INVARIANT_HEADING.match(h))}


def invariant_references(text: str) -> Iterator[tuple[int, int]]:
    """(line, number) for every invariant a text refers to; ranges are expanded."""
    for match in _INVARIANT_REF.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        listed = _normalize(match["list"])
        numbers = [int(n) for n in re.findall(r"\d+", listed)]
        ranges = re.findall(r"(\d+)\s*(?:-|\u2013|\bto\b)\s*(\d+)", listed)
        for low, high in ranges:
            numbers += range(int(low), int(high) + 1)
        for number in sorted(set(numbers)):
            yield line, number


def outside_references(text: str) -> Iterator[tuple[int, str]]:
    for match in _OUTSIDE.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(0)


def _text_files(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
            continue
        for path in sorted(root.rglob("*")):
            parts = path.relative_to(REPO).parts
            if any(p.startswith(".") and p != ".ci" for p in parts[:-1]):
                continue  # .venv, .git, caches
            if SKIPPED_DIRS & set(parts) or any(p.endswith(".egg-info") for p in parts):
                continue
            if path.is_file() and path.suffix in TEXT_SUFFIXES:
                yield path


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def _released_hashes() -> set[str]:
    manifest = json.loads((REPO / "workhorse" / "sql" / "released.json").read_text())
    return {sha for files in manifest.values() for sha in files.values()}


# ---- the checks ---------------------------------------------------------------------------------


def broken_citations(files: dict[str, str], page: str) -> list[str]:
    page_headings = headings(page)
    return [f"{name}:{line}: {DOC} \"{cited}\""
            for name, text in files.items() for line, cited in citations(text)
            if not names_a_heading(cited, page_headings)]


def unstated_invariants(files: dict[str, str], page: str) -> list[str]:
    stated = stated_invariants(page)
    return [f"{name}:{line}: invariant {number}"
            for name, text in files.items() for line, number in invariant_references(text)
            if number not in stated]


def outside_citations(files: dict[str, bytes], released: set[str]) -> list[str]:
    found = []
    for name, data in files.items():
        if hashlib.sha256(data).hexdigest() in released:
            continue  # shipped by a release: it can never change
        text = data.decode("utf-8", errors="replace")
        found += [f"{name}:{line}: {cited}" for line, cited in outside_references(text)]
    return found


def _repository(roots: Iterable[str]) -> dict[str, str]:
    files = {}
    for path in _text_files(REPO / root for root in roots):
        text = _read(path)
        if text is not None:
            files[str(path.relative_to(REPO))] = text
    return files


# ---- on the repository --------------------------------------------------------------------------


def test_the_contract_states_invariants_one_to_thirteen() -> None:
    assert stated_invariants(DESIGN.read_text()) == set(range(1, 14))


def test_every_heading_citation_names_a_heading_of_the_contract() -> None:
    files = _repository(CITING_ROOTS)
    assert sum(1 for text in files.values() for _ in citations(text)) > 100
    assert broken_citations(files, DESIGN.read_text()) == []


def test_every_invariant_referred_to_is_stated() -> None:
    files = _repository(CITING_ROOTS)
    assert sum(1 for text in files.values() for _ in invariant_references(text)) > 10
    assert unstated_invariants(files, DESIGN.read_text()) == []


def test_no_file_cites_a_document_outside_the_repository() -> None:
    files = {str(p.relative_to(REPO)): p.read_bytes()
             for p in _text_files(sorted(REPO.iterdir()))
             if not p.name.startswith(".") or p.parent.name == ".ci"}
    assert outside_citations(files, _released_hashes()) == []


# ---- each check fails on a broken variant -------------------------------------------------------

PAGE = """# Contract

## Named budgets (one limit shared by several queues) and rate bursts
### Rate bursts
## Job keys: unique jobs, debounce, superseding, progress
## Invariants of admission
### Invariant 1: no claim admits beyond the limit in force
### Invariant 2: keys are scoped

```text
## Not a heading: inside a fence
```
"""


def test_heading_citations_match_by_the_stated_rule() -> None:
    good = {
        "a.py": f'# see {DOC} "Named budgets"\n',
        "b.sql": f'-- ({DOC} "Named budgets ... and\n-- rate bursts")\n',
        "c.py": f'"""({DOC}, "Job keys: ...\n    progress")"""\n',
        "d.py": f'# {DOC} "rate bursts" and {DOC} "Job keys"\n',
        "e.py": f'# {DOC} "Invariant 2"\n',
        "f.sql": f'-- governed, {DOC}\n-- "Named budgets"\n',
    }
    assert broken_citations(good, PAGE) == []


def test_a_citation_of_a_missing_heading_is_reported() -> None:
    broken = {
        "a.py": f'x = 1\n# {DOC} "Named budget"\n',                 # a typo
        "b.sql": f'-- {DOC} "Job keys ... debounce"\n',              # not its end
        "c.md": f'see {DOC} "Not a heading"\n',                      # only inside a fence
        "d.py": f'# {DOC} "unique jobs"\n',                          # the middle of a heading
    }
    assert broken_citations(broken, PAGE) == [
        f'a.py:2: {DOC} "Named budget"',
        f'b.sql:1: {DOC} "Job keys ... debounce"',
        f'c.md:1: {DOC} "Not a heading"',
        f'd.py:1: {DOC} "unique jobs"',
    ]


def test_invariant_references_are_checked_against_the_stated_ones() -> None:
    assert stated_invariants(PAGE) == {1, 2}
    good = {"a.md": "invariant 1, and invariants 1 and 2; invariants 1-2; invariants 1\u20132\n"}
    assert unstated_invariants(good, PAGE) == []
    broken = {
        "a.md": "ok (invariant 2)\nloosens invariants 1-8\n",
        "b.sql": "-- invariants 1 and\n-- 3\n",
        "c.py": f"# Invariant {12} holds\n",
    }
    assert unstated_invariants(broken, PAGE) == [
        *(f"a.md:2: invariant {n}" for n in range(3, 9)),
        "b.sql:1: invariant 3",
        f"c.py:1: invariant {12}",
    ]


# The outside documents' names, split so that this file does not cite them itself.
CONTRACT, ADMISSION, HOUSE_PLAN = "DES" "IGN.md", "ADMIS" "SION.md", "STY" "LE.md"


def test_a_document_outside_the_repository_is_reported_unless_a_release_shipped_it() -> None:
    shipped = f"-- Admission ({CONTRACT}, invariants 1 to 7)\n".encode()
    files = {
        "workhorse/sql/released/0.2.0/shipped.sql": shipped,
        "benchmarks/HISTORY.md": f"as the prototypes in {ADMISSION} measured\n".encode(),
        "docs/x.md": b"see ../" + b"shared/notes\n",
        "workhorse/y.py": f"# house plan: {HOUSE_PLAN}\n".encode(),
        "docs/z.md": DOC.encode() + b" and docs/architecture.md are inside\n",
    }
    released = {hashlib.sha256(shipped).hexdigest()}
    assert outside_citations(files, released) == [
        f"benchmarks/HISTORY.md:1: {ADMISSION}",
        "docs/x.md:1: ../" + "shared",
        f"workhorse/y.py:1: {HOUSE_PLAN}",
    ]
    assert outside_citations(files, set())[0] == (
        f"workhorse/sql/released/0.2.0/shipped.sql:1: {CONTRACT}")
