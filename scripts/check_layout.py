"""The import map of runtime/: what each module imports from the package, and the two
rules docs/ARCHITECTURE.md states about it.

    python scripts/check_layout.py     # the table; the backend route; warnings; exit 1 if an import runs back up
    python scripts/check_layout.py --recipe=mls --recipe=fp8    # the route of those recipes (default niti)
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
import functools
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
MAX_IMPORTS = 8

# The rooms along the flow, first to last: a room may import only rooms after it.
# Rooms not listed here (new ones) are held to the fan-out target only, until added.
FLOW = (
    "__init__", "cli", "plot", "agreement", "fl", "train", "resume", "metrics",
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
# call from one room into another that hands on the choice is recorded, for the whole run
# (every op of every step, the evaluation, the checkpoint): the choice's own string
# (followed by identity), a Backend, or an object holding one. `deep=False` looks one level
# into a holder (its attributes, a collection's items: the parsed arguments, a dict of
# Backends); `deep=True` follows holders all the way down (attributes, slots, dicts, lists,
# tuples, sets, a bound method's object, a closure's cells), and counts values returned
# into a room as well as arguments, so a Backend reached through a Planner, a Plan or an
# Executor is one. The backends package counts as its registry (`backends`: names,
# select, supports, prepare) and one room per backend file (`backends.ops_cpu`), reached
# by a call of one of the backend's hooks (a kernel, wherever its class defines it);
# every other call on a backend (supports, prepare, ...) is a call into `backends`.
ROUTE_TARGET = 5
QUESTIONS = frozenset({"available", "chosen_by_auto", "supports", "close", "prepare", "scratch_bytes",
                       "release_scratch"})   # calls on a backend that run no kernel: the `backends` room


@functools.lru_cache(maxsize=None)
def route_room(filename: str, root: Path = RUNTIME) -> str | None:
    """The room of a source file (None outside runtime/); backend files are rooms of their own."""
    try:
        parts = Path(filename).resolve().relative_to(root.resolve()).with_suffix("").parts
    except ValueError:
        return None
    if parts[0] == "backends" and len(parts) > 1 and parts[1] != "__init__":
        return f"backends.{parts[1]}"
    return room(".".join(parts[:-1] if parts[-1] == "__init__" else parts))


def _holds(value, found, deep: bool) -> bool:
    """Does `value` hold something `found(v)` is true of: one level down (an attribute, a
    collection's item), or with `deep` at any depth, through attributes, slots,
    collections, bound methods and closures (each object looked at once)."""
    import types

    seen, todo = set(), [(value, 0)]
    while todo:
        v, depth = todo.pop()
        if id(v) in seen or v is None or isinstance(v, (str, bytes, int, float, bool, type, types.ModuleType)):
            continue
        seen.add(id(v))
        if depth and found(v):
            return True
        if depth == 1 and not deep:
            continue
        if type(v).__module__ == "numpy":
            continue    # arrays and scalars hold numbers
        children = []
        if isinstance(v, dict):
            children = list(v.values())
        elif isinstance(v, (list, tuple, set, frozenset, type({}.values()))):
            children = list(v)
        elif deep and isinstance(v, types.MethodType):
            children = [v.__self__, v.__func__]
        elif deep and isinstance(v, types.FunctionType):
            children = [c.cell_contents for c in (v.__closure__ or ()) if _filled(c)]
        else:
            held = getattr(v, "__dict__", None)
            if isinstance(held, dict):
                children = list(held.values())
            if deep:
                for klass in type(v).__mro__:
                    for slot in getattr(klass, "__slots__", ()):
                        if isinstance(slot, str) and hasattr(v, slot):
                            children.append(getattr(v, slot))
        todo.extend((c, depth + 1) for c in children)
    return False


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def trace_backend_choice(backend: str = "cpu", recipe: str = "niti", deep: bool = False,
                         model: str = "lenet5", budget: str | None = None) -> list[tuple[str, str]]:
    """(from room, to room) of every call that hands the choice on, in order, during one
    short training run of `recipe` on `model` (under a memory `budget`, "2MB", if given)
    from the command line (needs the built package)."""
    import tempfile
    import threading

    from dsptrain.backends.base import Backend

    from dsptrain.cli import main as dsptrain_main

    choice = "".join(backend)    # a string object of its own: argparse hands it on as it is

    def is_choice(value) -> bool:
        return value is choice or isinstance(value, Backend)

    def carries(value) -> bool:
        return is_choice(value) or _holds(value, is_choice, deep)

    hops = []

    def kernel_room(frame, code, to):
        """`to`, or the backend's own room for a hook called on it, `backends` for a question."""
        this = frame.f_locals.get("self")
        if isinstance(this, Backend) and not code.co_name.startswith("_") and code.co_name not in QUESTIONS:
            return f"backends.{type(this).__module__.rsplit('.', 1)[-1]}"
        return "backends"

    def profile(frame, event, arg):
        if event not in ("call", "return") or frame.f_back is None:
            return
        here, there = route_room(frame.f_code.co_filename), route_room(frame.f_back.f_code.co_filename)
        if here is None or there is None:
            return
        code = frame.f_code
        if event == "call":
            to, came = here, there
            if to.startswith("backends.") and came.startswith("backends"):
                return    # inside the backends package
            if to.startswith("backends."):
                to = kernel_room(frame, code, to)
            if to == came:
                return
            params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            if any(carries(frame.f_locals[p]) for p in params if p in frame.f_locals):
                hops.append((came, to))
        elif deep and here != there and arg is not None and not there.startswith("backends.") \
                and code.co_name != "__init__":
            came = "backends" if here.startswith("backends") else here   # what a backend or the registry returns
            if came != there and carries(arg):
                hops.append((came, there))

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "route.yaml"
        run.write_text(f"recipe: {recipe}\n" + f"model: {model}\n"
                       "data: {dataset: synthetic, train_limit: 32, test_limit: 16}\n"
                       "train: {epochs: 1, batch_size: 16, eval_batch_size: 16}\nenergy: estimate\n"
                       + (f"memory: {{budget: {budget}}}\n" if budget else ""))
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            status = dsptrain_main(["train", str(run), "--backend", choice, "--quiet", "--out", str(Path(tmp) / "out")])
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    if status:
        raise RuntimeError(f"the traced run of {recipe} on {model} ended with status {status}")
    return hops


def route(hops: list[tuple[str, str]]) -> tuple[list[str], dict[str, list[str]]]:
    """(the rooms the choice reaches from the CLI, in the order it first reaches them, over
    the whole run; for each room, the rooms it hands the choice to, in order). The backend
    files (`backends.ops_cpu`, `backends.ops_ref`: where the kernels are) are the route's
    end, one room however many of them the ops reach (`route_length`)."""
    rooms, handed = ["cli"], {}
    changed = True
    while changed:      # a hop from a room the choice reaches only later still counts
        changed = False
        for came, to in hops:
            if came not in rooms:
                continue
            handed.setdefault(came, [])
            if to not in handed[came]:
                handed[came].append(to)
                changed = True
            if to not in rooms:
                rooms.append(to)
                changed = True
    return rooms, handed


def route_length(rooms: list[str]) -> int:
    """Rooms on the route: the backend files count once, as its end (a kernel)."""
    kernels = [r for r in rooms if r.startswith("backends.")]
    return len(rooms) - len(kernels) + (1 if kernels else 0)


def describe_route(rooms: list[str], handed: dict[str, list[str]]) -> list[str]:
    kernels = [r for r in rooms if r.startswith("backends.")]
    path = [r for r in rooms if not r.startswith("backends.")] + (["|".join(kernels)] if kernels else [])
    lines = [f"backend choice: {' -> '.join(path)} ({route_length(rooms)} rooms, target {ROUTE_TARGET})"]
    for name, targets in handed.items():
        lines.append(f"  {name} hands it to {', '.join(targets)}")
    lines.append(f"  returns into train: {len(returns_into_train(handed))} (rooms that hand the choice back "
                 f"into train after it left it: {', '.join(returns_into_train(handed)) or 'none'})")
    return lines


def returns_into_train(handed: dict[str, list[str]]) -> list[str]:
    """Rooms other than the CLI that hand the choice to train/ (the choice coming back into the trainer)."""
    return [name for name, targets in handed.items() if "train" in targets and name != "cli"]


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
        recipes = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--recipe=")] or ["niti"]
        for recipe in recipes:
            for deep in (False, True):
                try:
                    rooms, handed = route(trace_backend_choice(recipe=recipe, deep=deep))
                except ImportError as exc:
                    print(f"layout: warning: backend route not traced (the package is not built: {exc})",
                          file=sys.stderr)
                    break
                print(f"{recipe}, holders followed {'all the way down' if deep else 'one level'}:")
                print("\n".join(describe_route(rooms, handed)))
                if route_length(rooms) > ROUTE_TARGET or returns_into_train(handed):
                    print(f"layout: warning: {recipe}: the backend choice reaches {route_length(rooms)} rooms "
                          f"(target {ROUTE_TARGET})", file=sys.stderr)
    problems = breaks(graph)
    for line in problems:
        print(f"layout: error: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
