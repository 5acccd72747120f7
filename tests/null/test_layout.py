"""The layout docs/ARCHITECTURE.md describes holds: imports run down the flow, never back up,
and only backends/ imports a backend's module (scripts/check_layout.py reads the source)."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _checker():
    spec = importlib.util.spec_from_file_location("check_layout", REPO / "scripts" / "check_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_runs_back_up_the_flow_or_into_a_backend():
    layout = _checker()
    assert layout.breaks(layout.import_map()) == []


def test_the_checker_sees_an_upward_import_and_a_reach_into_a_backend(tmp_path):
    """A backend importing the planner is caught, and so is a recipe importing ops_ref; a
    package re-exporting its modules is not."""
    layout = _checker()
    root = tmp_path / "runtime"
    (root / "backends").mkdir(parents=True)
    (root / "__init__.py").write_text("from .plan import build\n")
    (root / "plan.py").write_text("from .backends import PRIORITY\n")
    (root / "backends" / "__init__.py").write_text("from .ops_ref import RefBackend\nPRIORITY = ()\n")
    (root / "backends" / "ops_ref.py").write_text("from ..plan import build\n")
    (root / "algorithms.py").write_text("from .backends.ops_ref import RefBackend\n")
    graph = layout.import_map(root)
    assert graph["backends"] == {"backends.ops_ref"} and graph["plan"] == {"backends"}
    found = layout.breaks(graph, root)
    assert len(found) == 2, found
    assert found[0].startswith("algorithms imports backends.ops_ref: outside backends/"), found
    assert found[1].startswith("backends.ops_ref imports plan: back up the flow"), found
