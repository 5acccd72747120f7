"""The backend choice's route from the command line to a kernel, traced on a real run of
every recipe (scripts/check_layout.py: trace_backend_choice, over the whole run: every op of
every step, the evaluation, the checkpoint): the CLI hands the choice to the plan builder,
which makes the backends and its executor, and the executor calls the backend's hooks
itself, for a recipe's one-hook ops (Kernels) and its several-hook ops (Programs: the
recipe yields the calls, algorithms/_kernel.py) alike; the Trainer never hands it on."""
import importlib.util
from pathlib import Path

import pytest

from dsptrain.backends.ops_cpu import CpuBackend

REPO = Path(__file__).resolve().parents[2]
RECIPES = ("niti", "fp32", "octo", "wageubn", "afp", "mls", "fp8")
# A residual block (NITI: add_align_s8, and the join of the errors where the branches meet)
# and a global average pool, small enough for a traced run.
RESIDUAL = ("{name: tiny_residual, input_shape: [8, 8, 1], layers: [{kind: conv, out: 4, kernel: 3, padding: 1}, "
            "relu, {kind: residual, body: [{kind: conv, out: 4, kernel: 3, padding: 1}, relu, "
            "{kind: conv, out: 4, kernel: 3, padding: 1}]}, relu, globalavgpool, {kind: linear, out: 10}]}")
needs_cpu = pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")


def _checker():
    spec = importlib.util.spec_from_file_location("check_layout", REPO / "scripts" / "check_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LAYOUT = _checker()


def _assert_the_short_route(rooms, handed, kernels=("backends.ops_cpu",)):
    assert LAYOUT.route_length(rooms) <= LAYOUT.ROUTE_TARGET == 5, rooms             # fails if the route grows
    assert rooms == ["cli", "plan", "backends", "execute", *kernels], rooms
    assert handed["cli"] == ["plan"] and "train" not in handed, handed               # no return into train/
    assert set(handed["plan"]) == {"backends", "execute"}, handed                     # select, then the executor
    assert handed["execute"] == list(kernels), handed                                 # kernels, never the recipe
    assert "algorithms" not in rooms and not LAYOUT.returns_into_train(handed)


@needs_cpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_reaches_its_kernels_through_five_rooms(recipe):
    _assert_the_short_route(*LAYOUT.route(LAYOUT.trace_backend_choice("cpu", recipe=recipe)))


@needs_cpu
def test_a_residual_model_reaches_its_kernels_through_five_rooms():
    rooms, handed = LAYOUT.route(LAYOUT.trace_backend_choice("cpu", recipe="niti", model=RESIDUAL))
    # add_align_s8 and avgpool_global_s8 have no CPU kernel: those ops run on ref, the last fallback
    _assert_the_short_route(rooms, handed, kernels=("backends.ops_cpu", "backends.ops_ref"))


def test_the_route_follows_every_hand_over_from_the_cli():
    hops = [("cli", "train"), ("train", "plan"), ("plan", "backends"), ("memory", "plan"), ("plan", "execute"),
            ("execute", "backends.ops_cpu"), ("execute", "algorithms"), ("algorithms", "backends.ops_ref"),
            ("plan", "train")]
    rooms, handed = LAYOUT.route(hops)
    assert rooms == ["cli", "train", "plan", "backends", "execute", "backends.ops_cpu", "algorithms",
                     "backends.ops_ref"]                                              # past the first kernel too
    assert "memory" not in handed                                                     # never reached from the CLI
    assert LAYOUT.route_length(rooms) == 7                                            # the kernel files: one end
    lines = LAYOUT.describe_route(rooms, handed)
    assert lines[0].startswith("backend choice: cli -> train -> plan -> backends -> execute -> algorithms -> "
                               "backends.ops_cpu|backends.ops_ref (7 rooms"), lines[0]
    assert LAYOUT.returns_into_train(handed) == ["plan"] and "returns into train: 1" in lines[-1]


def test_deep_holders_are_followed_through_attributes_containers_methods_and_closures():
    from dsptrain.backends.ops_ref import RefBackend

    backend = RefBackend()

    class Holder:
        def __init__(self, value):
            self.value = value

    class Slotted:
        __slots__ = ("value",)

        def __init__(self, value):
            self.value = value

    def closure():
        return lambda: backend

    found = lambda v: isinstance(v, RefBackend)
    nested = Holder({"backends": [Slotted(backend)]})
    assert LAYOUT._holds(Holder(backend), found, deep=False)                          # one level: an attribute
    assert not LAYOUT._holds(nested, found, deep=False)                               # three levels down
    assert LAYOUT._holds(nested, found, deep=True)
    assert LAYOUT._holds(Holder(nested).__init__, found, deep=True)                   # a bound method's object
    assert LAYOUT._holds(closure(), found, deep=True)                                 # a closure's cell
    assert not LAYOUT._holds(Holder({"x": [1, "cpu", None]}), found, deep=True)
