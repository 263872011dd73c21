"""docs/frameworks.md quotes the framework examples: every Python block there (they need a
Django project or a FastAPI app, so the page runner only compiles them) must appear, as it is,
in an example file or in the test that runs it. The examples' tests are then the page's tests
(tests/acceptance/test_framework_examples.py, test_django_project.py,
test_django_tasks_backend.py)."""

from __future__ import annotations

from pathlib import Path

from test_docs import python_blocks

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "frameworks.md"
SOURCES = [*sorted((REPO / "examples" / "django").rglob("*.py")),
           REPO / "examples" / "fastapi" / "service.py",
           REPO / "tests" / "acceptance" / "test_django_tasks_backend.py"]


def test_every_python_block_is_quoted_from_tested_code() -> None:
    texts = {path: path.read_text("utf-8") for path in SOURCES}
    blocks = python_blocks(PAGE)
    assert len(blocks) >= 8
    missing = [block.where for block in blocks
               if not any(block.code.strip() in text for text in texts.values())]
    assert not missing, f"blocks not found verbatim in {[str(p) for p in SOURCES]}: {missing}"
