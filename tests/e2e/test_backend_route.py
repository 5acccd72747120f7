"""How a recipe meets the backend: imports run one way (a recipe imports no backend, nothing
imports back up the flow), and every hook an op function calls runs on the backend the
executor handed it (the plan's placement, or the fallback after a NoSupport): traced on a
real step and evaluation of every recipe, and of a residual model under NITI."""

import importlib.util
import sys
from pathlib import Path

import pytest
from dsptrain.backends.base import Backend
from dsptrain.backends.ops_cpu import CpuBackend

REPO = Path(__file__).resolve().parents[2]
RUNTIME = (REPO / "runtime").resolve()
RECIPES = ("niti", "fp32", "octo", "wageubn", "afp", "mls", "fp8")
# A residual block (NITI: add_align_s8, and the join of the errors where the branches meet)
# and a global average pool, small enough for a traced run.
RESIDUAL = (
    "{name: tiny_residual, input_shape: [8, 8, 1], layers: [{kind: conv, out: 4, kernel: 3, padding: 1}, "
    "relu, {kind: residual, body: [{kind: conv, out: 4, kernel: 3, padding: 1}, relu, "
    "{kind: conv, out: 4, kernel: 3, padding: 1}]}, relu, globalavgpool, {kind: linear, out: 10}]}"
)
needs_cpu = pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")


def _checker():
    spec = importlib.util.spec_from_file_location("check_layout", REPO / "scripts" / "check_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LAYOUT = _checker()


def test_imports_run_one_way_and_no_recipe_imports_a_backend():
    graph = LAYOUT.import_map()
    assert LAYOUT.breaks(graph) == []
    recipes = {name: targets for name, targets in graph.items() if LAYOUT.room(name) == "algorithms"}
    assert recipes and not any(LAYOUT.room(t) == "backends" for ts in recipes.values() for t in ts), recipes


def _under(frame, folder: str) -> bool:
    try:
        return Path(frame.f_code.co_filename).resolve().is_relative_to(RUNTIME / folder)
    except OSError:
        return False


def _traced_hook_calls(tmp_path, recipe: str, model: str = "lenet5") -> list[tuple]:
    """(backend the op function was handed, backend the hook ran on, hook) for every call a
    recipe's code makes on a Backend during one training step and one prediction on the cpu
    backend choice."""
    from dsptrain.config import load_run
    from dsptrain.train import Trainer

    path = tmp_path / "route.yaml"
    path.write_text(
        f"recipe: {recipe}\nmodel: {model}\n"
        "data: {dataset: synthetic, train_limit: 32, test_limit: 16}\n"
        "train: {epochs: 1, batch_size: 16, eval_batch_size: 16}\nenergy: estimate\n"
    )
    calls = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None or not _under(frame.f_back, "algorithms"):
            return
        this = frame.f_locals.get("self")
        if not isinstance(this, Backend):
            return
        caller = frame.f_back  # up to the op function: the recipe frame the executor called
        while caller is not None and not (_under(caller, "algorithms") and _under(caller.f_back, "execute")):
            caller = caller.f_back
        assert caller is not None, f"{frame.f_code.co_name} called outside an op function"
        calls.append((caller.f_locals["backend"], this, frame.f_code.co_name))

    with Trainer(load_run(path), backend="cpu", out_dir=tmp_path / "out", progress=False) as trainer:
        images, labels = trainer.train_data[:16]
        sys.setprofile(profile)
        try:
            trainer.step(images, labels)
            trainer.predict(images)
        finally:
            sys.setprofile(None)
    return calls


def _assert_each_hook_on_its_handed_backend(calls, expected_hooks: set[str]):
    assert calls, "no op function called a backend hook"
    wrong = [(hook, handed.name, ran.name) for handed, ran, hook in calls if ran is not handed]
    assert not wrong, wrong
    assert expected_hooks <= {hook for _, _, hook in calls}, {hook for _, _, hook in calls}


@needs_cpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_calls_the_backend_it_is_handed(tmp_path, recipe):
    expected = {
        "niti": {"conv2d_requant_s8", "niti_update_s8"},
        "fp32": {"conv2d_f32", "sgd_f32"},
        "octo": {"prc_quantize", "dequantize_compensate"},
        "wageubn": {"wageubn_update", "shift_round"},
        "afp": {"absmax_f", "quantize_f"},
        "mls": {"quantize_mls_ranged", "matmul_s16"},
        "fp8": {"matmul_fp16_chunked", "round_float"},
    }[recipe]
    calls = _traced_hook_calls(tmp_path, recipe)
    _assert_each_hook_on_its_handed_backend(calls, expected)
    assert {handed.name for handed, _, _ in calls} == {"cpu"}


@needs_cpu
def test_a_residual_model_calls_the_backends_its_ops_are_placed_on(tmp_path):
    calls = _traced_hook_calls(tmp_path, "niti", RESIDUAL)
    _assert_each_hook_on_its_handed_backend(calls, {"add_align_s8", "avgpool_global_s8", "conv2d_requant_s8"})
    # add_align_s8 and avgpool_global_s8 have no CPU kernel: those ops are placed on ref, the last fallback
    assert {hook for handed, _, hook in calls if handed.name == "ref"} >= {"add_align_s8", "avgpool_global_s8"}


def test_a_hook_the_backend_lacks_sends_the_op_on():
    """NotImplementedError from a hook (backends/base.py's default) is a NoSupport, raised once
    in the executor (execute/bound.call_op): the op goes to the next backend."""
    from dsptrain.backends.ops_ref import RefBackend
    from dsptrain.errors import NoSupport
    from dsptrain.execute.bound import call_op

    class Lacking(RefBackend):
        name = "lacking"

        def relu_f32(self, x):
            raise NotImplementedError("lacking: no relu_f32")

    def relu(backend, op, env, ctx):
        return {"y": backend.relu_f32(env["x"])}

    with pytest.raises(NoSupport, match="no relu_f32"):
        call_op(relu, Lacking(), None, {"x": 1.0}, None)
