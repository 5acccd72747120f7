"""The backend choice's route from the command line to a kernel, traced on a real run
(scripts/check_layout.py: trace_backend_choice): the CLI hands the choice to the plan
builder, which makes the backends and its executor, and the executor calls the CPU
backend's kernels itself (the recipe maps tensors to a hook's arguments, algorithms/_kernel.py);
the Trainer never hands it on."""
import importlib.util
from pathlib import Path

import pytest

from dsptrain.backends.ops_cpu import CpuBackend

REPO = Path(__file__).resolve().parents[2]


def _checker():
    spec = importlib.util.spec_from_file_location("check_layout", REPO / "scripts" / "check_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")
def test_the_backend_choice_goes_cli_plan_execute_kernel():
    layout = _checker()
    rooms, handed = layout.route(layout.trace_backend_choice("cpu"))
    assert len(rooms) <= layout.ROUTE_TARGET == 5, rooms                         # fails if the route grows
    assert rooms == ["cli", "plan", "backends", "execute", "backends.ops_cpu"], rooms
    assert handed["cli"] == ["plan"] and "train" not in handed, handed           # no return into train/
    assert set(handed["plan"]) == {"backends", "execute"}, handed                 # select, then the executor
    assert handed["execute"] == ["backends.ops_cpu"], handed                      # the kernel, not the recipe


def test_the_route_follows_the_first_hand_over_of_each_room():
    layout = _checker()
    hops = [("cli", "train"), ("train", "plan"), ("plan", "backends"), ("memory", "plan"), ("plan", "execute"),
            ("execute", "algorithms"), ("algorithms", "backends.ops_cpu"), ("execute", "backends.ops_ref")]
    rooms, handed = layout.route(hops)
    assert rooms == ["cli", "train", "plan", "backends", "execute", "algorithms", "backends.ops_cpu"]
    assert "memory" not in handed                                                 # never reached from the CLI
    lines = layout.describe_route(rooms, handed)
    assert lines[0].startswith("backend choice: cli -> train -> plan") and "7 rooms" in lines[0]
    assert "returns into train: 0" in lines[-1]


@pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")
def test_fp32_reaches_its_kernels_by_the_same_route():
    layout = _checker()
    rooms, handed = layout.route(layout.trace_backend_choice("cpu", recipe="fp32"))
    assert len(rooms) <= layout.ROUTE_TARGET, rooms                               # fails if the route grows
    assert rooms == ["cli", "plan", "backends", "execute", "backends.ops_cpu"], rooms
    assert "train" not in handed and handed["execute"] == ["backends.ops_cpu"], handed
