"""The modules of workhorse/ form layers that only point down, with no import cycle.

Every import counts: at module level, inside functions, under `if TYPE_CHECKING:`, relative
(`from . import x`, `from ..errors import E`) and absolute (`import workhorse.x`). A module may
import a module of its own layer or of a layer below; an import that points up, or any cycle
(lazy ones too), fails. The layers are data here, and the same list is docs/architecture.md's
"Layers" section: the test compares the two, so that the documentation cannot drift.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "workhorse"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Top to bottom. A name stands for that module and, for a package, every module under it; the
# root package `workhorse` stands for its __init__ only.
LAYERS: list[tuple[str, list[str]]] = [
    ("entry points", ["workhorse", "workhorse.__main__", "workhorse.cli", "workhorse.dashboard",
                      "workhorse.contrib", "workhorse.testing", "workhorse.pytest_plugin",
                      "workhorse._demo"]),
    ("worker", ["workhorse.worker"]),
    ("app", ["workhorse.app", "workhorse._placement", "workhorse._sync"]),
    ("task", ["workhorse.task"]),
    ("canvas and queue", ["workhorse.canvas", "workhorse.queue", "workhorse._queue_dead",
                          "workhorse._queue_history", "workhorse._queue_backoffs",
                          "workhorse._queue_key_limits", "workhorse._queue_durable",
                          "workhorse.durable"]),
    ("enqueuer", ["workhorse._enqueue"]),
    ("handles and calls", ["workhorse.handle", "workhorse._calls", "workhorse._holds"]),
    ("connections", ["workhorse.database", "workhorse._results", "workhorse._listen"]),
    ("operations", ["workhorse._ops", "workhorse._incident", "workhorse._reasons"]),
    ("driver", ["workhorse._driver", "workhorse._sql", "workhorse.embedded",
                "workhorse._embedded_account", "workhorse.context", "workhorse.telemetry",
                "workhorse.retry", "workhorse._text"]),
    ("data", ["workhorse.types", "workhorse.errors", "workhorse._durations",
              "workhorse._occurrences"]),
]

# Cycles that exist today in modules another change owns, each with what removes it; the test
# fails when one of them is gone (then delete it here) as much as when a new one appears.
KNOWN_CYCLES: dict[frozenset[str], str] = {}

Graph = dict[str, set[str]]


# ---- reading the imports ---------------------------------------------------------------------


def module_names(package: Path) -> dict[str, tuple[str, bool]]:
    """Dotted name -> (source, is a package's __init__) of every module under `package`."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path.read_text("utf-8"), is_package)
    return found


def _known(name: str, modules: Iterable[str]) -> str | None:
    """The longest prefix of `name` that is a module (`workhorse.x.y.Class` -> `workhorse.x.y`)."""
    names = set(modules)
    while name and name not in names:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, source: str, is_package: bool, modules: Iterable[str],
               top: str = "workhorse") -> set[str]:
    """The modules of `modules` that module `name` imports anywhere in `source`.

    >>> sorted(imports_of("workhorse.a", "def f():\\n    from . import b", False,
    ...                   ["workhorse", "workhorse.a", "workhorse.b"]))
    ['workhorse.b']
    """
    modules = set(modules)
    package = name if is_package else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {_known(alias.name, modules) for alias in node.names
                      if alias.name.split(".")[0] == top}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1]
                                + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != top:
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else _known(base, modules))
    found.discard(None)
    found.discard(name)
    return {module for module in found if module is not None}


def import_graph(modules: Mapping[str, tuple[str, bool]], top: str = "workhorse") -> Graph:
    return {name: imports_of(name, source, is_package, modules, top)
            for name, (source, is_package) in modules.items()}


# ---- the rules --------------------------------------------------------------------------------


def cycles(graph: Graph) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm).

    >>> cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    [frozenset({'a', 'b'})]
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_of(module: str, layers: list[tuple[str, list[str]]], top: str = "workhorse") -> int:
    """The index of the layer that names `module` (the longest name that covers it wins);
    KeyError when none does."""
    best: tuple[int, int] | None = None
    for position, (_, names) in enumerate(layers):
        for named in names:
            covers = module == named or (named != top and module.startswith(named + "."))
            if covers and (best is None or len(named) > best[0]):
                best = (len(named), position)
    if best is None:
        raise KeyError(module)
    return best[1]


def upward_imports(graph: Graph, layers: list[tuple[str, list[str]]],
                   top: str = "workhorse") -> list[str]:
    """Each import of a module in a higher layer than the importer's, as a sentence."""
    found = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module, layers, top)
        for target in sorted(targets):
            theirs = layer_of(target, layers, top)
            if theirs < mine:
                found.append(f"{module} ({layers[mine][0]}) imports {target} "
                             f"({layers[theirs][0]})")
    return found


def documented_layers(markdown: str) -> list[tuple[str, list[str]]]:
    """The numbered list of the "## Layers" section: `1. name: `module`, `module``."""
    section = re.search(r"^## Layers\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    assert section, 'docs/architecture.md has no "## Layers" section'
    layers = []
    for line in section.group(1).splitlines():
        item = re.match(r"^\d+\. (.+?): (`.*)$", line.strip())
        if item:
            layers.append((item.group(1), re.findall(r"`([^`]+)`", item.group(2))))
    return layers


# ---- on workhorse/ ---------------------------------------------------------------------------


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for module in module_names(PACKAGE):
        try:
            layer_of(module, LAYERS)
        except KeyError:
            unplaced.append(module)
    assert unplaced == []


def test_no_import_points_up() -> None:
    assert upward_imports(import_graph(module_names(PACKAGE)), LAYERS) == []


def test_no_import_cycle() -> None:
    found = set(cycles(import_graph(module_names(PACKAGE))))
    assert found - set(KNOWN_CYCLES) == set(), "new import cycles"
    assert set(KNOWN_CYCLES) - found == set(), "a known cycle is gone: delete it from KNOWN_CYCLES"


def test_the_documented_layers_are_these() -> None:
    assert documented_layers(ARCHITECTURE.read_text("utf-8")) == LAYERS


# ---- the checks catch what they are for --------------------------------------------------------

LITTLE_LAYERS: list[tuple[str, list[str]]] = [
    ("top", ["pkg.app"]),
    ("middle", ["pkg.ops"]),
    ("bottom", ["pkg.driver", "pkg.types"]),
]


def _little(sources: dict[str, str]) -> Graph:
    modules = {name: (source, False) for name, source in sources.items()}
    return import_graph(modules, top="pkg")


def test_a_sound_set_passes() -> None:
    graph = _little({
        "pkg.app": "from . import ops\nimport pkg.types\n",
        "pkg.ops": "from .driver import drive\n",
        "pkg.driver": "from .types import Row\n",
        "pkg.types": "",
    })
    assert cycles(graph) == []
    assert upward_imports(graph, LITTLE_LAYERS, top="pkg") == []


def test_a_cycle_at_module_level_fails() -> None:
    graph = _little({
        "pkg.app": "", "pkg.ops": "",
        "pkg.driver": "from .types import Row\n",
        "pkg.types": "from pkg.driver import drive\n",
    })
    assert cycles(graph) == [frozenset({"pkg.driver", "pkg.types"})]


def test_a_lazy_import_cycle_fails() -> None:
    graph = _little({
        "pkg.app": "", "pkg.ops": "",
        "pkg.driver": "from . import types\n",
        "pkg.types": "def row():\n    from .driver import drive\n    return drive\n",
    })
    assert cycles(graph) == [frozenset({"pkg.driver", "pkg.types"})]


def test_an_import_under_type_checking_counts() -> None:
    graph = _little({
        "pkg.app": "", "pkg.ops": "", "pkg.types": "",
        "pkg.driver": "if TYPE_CHECKING:\n    from .ops import Operation\n",
    })
    assert upward_imports(graph, LITTLE_LAYERS, top="pkg") == [
        "pkg.driver (bottom) imports pkg.ops (middle)"]


def test_an_upward_import_fails() -> None:
    graph = _little({
        "pkg.app": "", "pkg.driver": "", "pkg.types": "",
        "pkg.ops": "def run():\n    import pkg.app\n",
    })
    assert upward_imports(graph, LITTLE_LAYERS, top="pkg") == [
        "pkg.ops (middle) imports pkg.app (top)"]


# Rooms of one concern (docs/architecture.md "Module map"): a module that outgrows this holds
# more than one.
MODULE_LINES = 900


def _oversized(root: Path, limit: int) -> list[str]:
    return sorted(f"{path.relative_to(root)}: {n}" for path in root.rglob("*.py")
                  if (n := len(path.read_text().splitlines())) > limit)


def test_no_module_is_over_the_size_of_one_concern() -> None:
    assert _oversized(PACKAGE, MODULE_LINES) == []


def test_the_size_check_finds_a_big_module() -> None:
    # The largest module is over a smaller limit: the check can fail.
    assert _oversized(PACKAGE, 800) != []
