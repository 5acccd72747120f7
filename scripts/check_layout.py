"""The import map of runtime/: what each module imports from the package, and the two
rules docs/ARCHITECTURE.md states about it.

    python scripts/check_layout.py     # the table; warnings; exit 1 if an import runs back up

- direction (enforced, tests/null/test_layout.py): imports run down the flow, from a room
  earlier in FLOW to a later one, never back up. A room is a top-level module or package
  of runtime/; a package's __init__.py may re-export its own modules.
- backends are found by name (enforced): outside backends/, code imports the package's
  face (`backends`: names, `select`, `backend_class`), never a backend's own module.
- fan-out (a target, warned about): a module imports about MAX_IMPORTS other modules of
  the package at most. Names taken from a package's __init__.py count as one module.
- the map (warned about): docs/ARCHITECTURE.md names every room of runtime/.

Imports are read from the source (ast), lazy ones inside functions included.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
MAX_IMPORTS = 8

# The rooms along the flow, first to last: a room may import only rooms after it.
# Rooms not listed here (new ones) are held to the fan-out target only, until added.
FLOW = (
    "__init__",
    "cli",
    "plot",
    "agreement",
    "fl",
    "train",
    "profile",
    "resume",
    "metrics",
    "calibrate",
    "config",
    "interchange",
    "rescale",
    "plan",
    "cost",
    "energy",
    "execute",
    "memory",
    "graph",
    "algorithms",
    "models",
    "nn",
    "data",
    "checkpoint",
    "backends",
    "float_ops",
    "cores",
    "layout",
    "inputs",
    "numerics",
    "errors",
)


def modules(root: Path = RUNTIME) -> dict[str, tuple[Path, bool]]:
    """Dotted name inside the package ("" for its __init__) -> (file, is a package)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imports_of(name: str, path: Path, package: bool, known) -> set[str]:
    """The package's modules that `name` imports (relative or `dsptrain.` imports)."""
    here = name.split(".") if name else []
    if not package:
        here = here[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
            target = ".".join([*base, *([node.module] if node.module else [])])
        elif node.module and node.module.split(".")[0] == "dsptrain":
            target = node.module[len("dsptrain") :].lstrip(".")
        else:
            continue
        for alias in node.names:
            sub = f"{target}.{alias.name}" if target else alias.name
            targets.add(sub if sub in known else target)
    # The package itself ("": `from . import __version__`, the native `_cpu_ops`) is loaded
    # before any of its modules anyway: not an edge.
    return {t for t in targets if t in known and t and t != name}


def room(name: str) -> str:
    return name.split(".")[0] if name else "__init__"


def import_map(root: Path = RUNTIME) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, package, known) for name, (path, package) in known.items()}


def too_many(graph: dict[str, set[str]]) -> list[str]:
    """Modules above the fan-out target."""
    return [
        f"{name or '__init__'} imports {len(targets)} modules (target {MAX_IMPORTS}): {', '.join(sorted(targets))}"
        for name, targets in sorted(graph.items())
        if len(targets) > MAX_IMPORTS
    ]


def unmapped(root: Path = RUNTIME) -> list[str]:
    """Rooms of runtime/ that docs/ARCHITECTURE.md's module table does not name."""
    text = (root.parent / "docs" / "ARCHITECTURE.md").read_text()
    rooms = {room(name) for name in modules(root)} - {"__init__"}
    return sorted(r for r in rooms if f"runtime/{r}" not in text)


def breaks(graph: dict[str, set[str]], root: Path = RUNTIME) -> list[str]:
    """Imports that run back up the flow, or reach into a backend's module."""
    known = modules(root)
    found = []
    for name, targets in sorted(graph.items()):
        label = name or "__init__"
        here = room(name)
        if known[name][1] or here not in FLOW:  # a package's __init__ re-exports; unlisted rooms
            continue
        for target in sorted(targets):
            there = room(target)
            if there != here and there in FLOW and FLOW.index(there) < FLOW.index(here):
                found.append(f"{label} imports {target or '__init__'}: back up the flow ({here} comes after {there})")
            if there == "backends" and here != "backends" and target != "backends":
                found.append(f"{label} imports {target}: outside backends/, use the package's names")
    return found


def main() -> int:
    graph = import_map()
    width = max(len(n or "__init__") for n in graph)
    for name, targets in sorted(graph.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{len(targets):3d}  {name or '__init__':<{width}}  {' '.join(sorted(t or '__init__' for t in targets))}")
    for line in too_many(graph):
        print(f"layout: warning: {line}", file=sys.stderr)
    for name in unmapped():
        print(f"layout: warning: runtime/{name} is not in docs/ARCHITECTURE.md's module table", file=sys.stderr)
    problems = breaks(graph)
    for line in problems:
        print(f"layout: error: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
