"""The backend choice's route from the command line to a kernel, traced on a real run of
every recipe (scripts/check_layout.py: trace_backend_choice, over the whole run: every op of
every step, the evaluation, the checkpoint): the CLI hands the choice to the plan builder,
which makes the backends and its executor, and the executor calls the backend's hooks
itself, for a recipe's one-hook ops (Kernels) and its several-hook ops (Programs: the
recipe yields the calls, algorithms/_kernel.py) alike. Traced with holders followed one
level down and all the way down (a Planner, a Plan, a Step, a closure over one): the
Trainer is served by the CLI's Step and never holds a backend, so train/ is not reached."""
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


def _assert_the_deep_route(rooms, handed, kernels=("backends.ops_cpu",)):
    assert LAYOUT.route_length(rooms) <= LAYOUT.ROUTE_TARGET == 5, rooms
    assert rooms == ["cli", "plan", "backends", "execute", *kernels], rooms
    # the CLI makes the Planner and the Step that runs its plans (execute/step.py), and serves
    # the Trainer's requests with it: train/ is handed nothing that holds a backend
    assert set(handed["cli"]) == {"plan", "execute"} and "train" not in handed, handed
    assert not any("train" in targets for targets in handed.values()), handed
    assert set(handed["execute"]) == {"plan", *kernels}, handed                      # its Planner, the kernels


@needs_cpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_keeps_five_rooms_with_holders_followed_all_the_way_down(recipe):
    _assert_the_deep_route(*LAYOUT.route(LAYOUT.trace_backend_choice("cpu", recipe=recipe, deep=True)))


@needs_cpu
def test_a_residual_model_keeps_five_rooms_with_holders_followed_all_the_way_down():
    rooms, handed = LAYOUT.route(LAYOUT.trace_backend_choice("cpu", recipe="niti", model=RESIDUAL, deep=True))
    _assert_the_deep_route(rooms, handed, kernels=("backends.ops_cpu", "backends.ops_ref"))


@needs_cpu
def test_a_budgeted_run_keeps_five_rooms_with_holders_followed_all_the_way_down():
    # the memory layer is handed sizes (plan.ScratchTable, Planner.adopt_scratch), never a backend
    _assert_the_deep_route(*LAYOUT.route(LAYOUT.trace_backend_choice("cpu", recipe="niti", deep=True, budget="2MB")))


@needs_cpu
def test_a_served_trainer_holds_no_backend_before_or_after_a_step(small_run, tmp_path):
    """What the tracer cannot see (values sent into the Trainer's generators) checked directly:
    the Trainer the CLI serves, and what a step hands it, hold no Backend at any depth."""
    import argparse

    from dsptrain.backends.base import Backend
    from dsptrain.cli.overrides import planned_parts
    from dsptrain.execute import Step, serve
    from dsptrain.train import Trainer

    run = small_run("mls")
    parts, planner = planned_parts(run, argparse.Namespace(backend="cpu"), notes=False)
    step = Step(run, parts.model, parts.frozen, parts.algorithm, parts.device, planner)
    trainer = Trainer(run, out_dir=tmp_path, progress=False, parts=parts, served=True)
    found = lambda v: isinstance(v, Backend)
    try:
        assert not LAYOUT._holds(trainer, found, deep=True)
        images, labels = trainer.train_data[:16]
        stats = serve(step, trainer.step_requests(images, labels))
        scores = serve(step, trainer.predict_requests(images))
        assert stats.ops_on.get("cpu") and scores.shape == (16, 10)
        assert not LAYOUT._holds(trainer, found, deep=True) and not LAYOUT._holds(stats, found, deep=True)
        assert LAYOUT._holds(step, found, deep=True)                                 # the Step is where they are
        with pytest.raises(RuntimeError, match="served"):
            trainer.step(images, labels)                                             # it has no Step to ask
    finally:
        trainer.close()
        step.close()


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
