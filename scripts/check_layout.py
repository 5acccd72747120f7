"""The import map of runtime/: what each module imports from the package, and the two
rules docs/ARCHITECTURE.md states about it.

    python scripts/check_layout.py     # the table; the backend route; warnings; exit 1 if an import runs back up
    python scripts/check_layout.py --static    # without running a training step (no built package needed)

- direction (enforced, tests/null/test_layout.py): imports run down the flow, from a room
  earlier in FLOW to a later one, never back up. A room is a top-level module or package
  of runtime/; a package's __init__.py may re-export its own modules.
- backends are found by name (enforced): outside backends/, code imports the package's
  face (`backends`: names, `select`, `backend_class`), never a backend's own module.
- fan-out (a target, warned about): a module imports about MAX_IMPORTS other modules of
  the package at most. Names taken from a package's __init__.py count as one module.
- the map (warned about): docs/ARCHITECTURE.md names every room of runtime/.
- the backend route (measured by running one short training, printed; target ROUTE_TARGET
  rooms, none handed the choice back): the rooms the backend choice passes through from
  the CLI to a kernel (`trace_backend_choice`, `route`).

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
    "__init__", "cli", "plot", "agreement", "fl", "train", "resume", "metrics", "images",
    "config", "interchange", "rescale", "plan", "cost", "energy", "execute", "memory",
    "graph", "algorithms", "models", "nn", "data", "checkpoint", "backends", "float_ops",
    "cores", "layout", "inputs", "numerics", "errors",
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
            base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
            target = ".".join([*base, *([node.module] if node.module else [])])
        elif node.module and node.module.split(".")[0] == "dsptrain":
            target = node.module[len("dsptrain"):].lstrip(".")
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
    return [f"{name or '__init__'} imports {len(targets)} modules (target {MAX_IMPORTS}): {', '.join(sorted(targets))}"
            for name, targets in sorted(graph.items()) if len(targets) > MAX_IMPORTS]


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
        if known[name][1] or here not in FLOW:     # a package's __init__ re-exports; unlisted rooms
            continue
        for target in sorted(targets):
            there = room(target)
            if there != here and there in FLOW and FLOW.index(there) < FLOW.index(here):
                found.append(f"{label} imports {target or '__init__'}: back up the flow ({here} comes after {there})")
            if there == "backends" and here != "backends" and target != "backends":
                found.append(f"{label} imports {target}: outside backends/, use the package's names")
    return found


# ---------------------------------------------------------------- the backend choice's route
# docs/ARCHITECTURE.md: the backend choice travels from the CLI to a kernel through at most
# ROUTE_TARGET rooms, and never back into train/. Measured, not read from the source: one
# `dsptrain train --backend cpu` of a few synthetic batches runs under a profiler, and every
# call from one room into another that hands on the choice is recorded: the choice's own
# string (followed by identity), an object holding it (`.backend`: the parsed arguments,
# the run config), a Backend, or a collection of Backends. The backends package counts as
# its registry (`backends`: names, select) and one room per backend file (`backends.ops_cpu`),
# reached by a call of one of the backend's hooks (a kernel); every other call on a
# backend (supports, prepare, ...) is a call into `backends`.
ROUTE_TARGET = 5


def route_room(filename: str, root: Path = RUNTIME) -> str | None:
    """The room of a source file (None outside runtime/); backend files are rooms of their own."""
    try:
        parts = Path(filename).resolve().relative_to(root.resolve()).with_suffix("").parts
    except ValueError:
        return None
    if parts[0] == "backends" and len(parts) > 1 and parts[1] != "__init__":
        return f"backends.{parts[1]}"
    return room(".".join(parts[:-1] if parts[-1] == "__init__" else parts))


def trace_backend_choice(backend: str = "cpu", recipe: str = "niti") -> list[tuple[str, str]]:
    """(from room, to room) of every call that hands the choice on, in order, during one
    short training run of `recipe` from the command line (needs the built package)."""
    import tempfile
    import threading

    from dsptrain.backends.base import Backend
    from dsptrain.cli import main as dsptrain_main

    choice = "".join(backend)    # a string object of its own: argparse hands it on as it is

    def carries(value) -> bool:
        if value is choice or isinstance(value, Backend):
            return True
        if isinstance(value, (dict, list, tuple, type({}.values()))):
            items = list(value.values() if isinstance(value, dict) else value)[:32]
            return any(item is choice or isinstance(item, Backend) for item in items)
        held = getattr(value, "__dict__", None)   # a holder: the parsed arguments, the run config, a proxy
        return isinstance(held, dict) and any(v is choice or isinstance(v, Backend) for v in held.values())

    hops = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        to, came = route_room(frame.f_code.co_filename), route_room(frame.f_back.f_code.co_filename)
        if to is None or came is None:
            return
        code = frame.f_code
        if to.startswith("backends.") and came.startswith("backends"):
            return    # inside the backends package
        if to.startswith("backends."):
            # a call on a backend: a kernel when it is one of its hooks, else a question
            # (supports, prepare, scratch_bytes, ...) to the backends package
            this = frame.f_locals.get("self")
            if not (isinstance(this, Backend) and code.co_name in this.hooks):
                to = "backends"
        if to == came:
            return
        params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(carries(frame.f_locals[p]) for p in params if p in frame.f_locals):
            hops.append((came, to))

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "route.yaml"
        run.write_text(f"recipe: {recipe}\n" + "model: lenet5\ndata: {dataset: synthetic, train_limit: 32, test_limit: 16}\n"
                       "train: {epochs: 1, batch_size: 16, eval_batch_size: 16}\nenergy: estimate\n")
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            dsptrain_main(["train", str(run), "--backend", choice, "--quiet", "--out", str(Path(tmp) / "out")])
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    return hops


def route(hops: list[tuple[str, str]]) -> tuple[list[str], dict[str, list[str]]]:
    """(the rooms the choice reaches, in the order it first reaches them, from the CLI to
    the first backend file; for each room, the rooms it hands the choice to, in order)."""
    rooms, handed = ["cli"], {}
    for came, to in hops:
        if came not in rooms:
            continue    # a hop from a room the choice has not reached through the CLI (none expected)
        handed.setdefault(came, [])
        if to not in handed[came]:
            handed[came].append(to)
        if to not in rooms:
            rooms.append(to)
        if to.startswith("backends.ops_"):
            break
    return rooms, handed


def describe_route(rooms: list[str], handed: dict[str, list[str]]) -> list[str]:
    lines = [f"backend choice: {' -> '.join(rooms)} ({len(rooms)} rooms, target {ROUTE_TARGET})"]
    for name, targets in handed.items():
        lines.append(f"  {name} hands it to {', '.join(targets)}")
    returns = len(handed.get("train", [])) - 1
    lines.append(f"  returns into train: {max(returns, 0)} (train hands the choice on to "
                 f"{len(handed.get('train', []))} rooms; each after the first is a return)")
    return lines


def main() -> int:
    graph = import_map()
    width = max(len(n or "__init__") for n in graph)
    for name, targets in sorted(graph.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{len(targets):3d}  {name or '__init__':<{width}}  {' '.join(sorted(t or '__init__' for t in targets))}")
    for line in too_many(graph):
        print(f"layout: warning: {line}", file=sys.stderr)
    for name in unmapped():
        print(f"layout: warning: runtime/{name} is not in docs/ARCHITECTURE.md's module table", file=sys.stderr)
    if "--static" not in sys.argv[1:]:
        try:
            rooms, handed = route(trace_backend_choice())
        except ImportError as exc:
            print(f"layout: warning: backend route not traced (the package is not built: {exc})", file=sys.stderr)
        else:
            print("\n".join(describe_route(rooms, handed)))
            if len(rooms) > ROUTE_TARGET:
                print(f"layout: warning: the backend choice reaches {len(rooms)} rooms (target {ROUTE_TARGET})",
                      file=sys.stderr)
    problems = breaks(graph)
    for line in problems:
        print(f"layout: error: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
