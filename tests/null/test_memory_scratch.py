"""The backends' own scratch in the memory plan: Backend.scratch_bytes, counted per buffer
at its largest (a grow-only buffer is kept), added to every option's peak."""

import dsptrain
import pytest
from dsptrain.backends.base import Backend
from dsptrain.backends.ops_cpu import CpuBackend
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.graph import lower
from dsptrain.memory.fit import Fitter, kept_scratch
from dsptrain.models import build_model
from dsptrain.plan import place


@pytest.fixture(scope="module")
def graph():
    return lower(build_model("lenet5"), dsptrain.load_recipe("niti"), 32)


def test_the_hook_is_optional_and_counts_nothing_by_default(graph):
    op = graph.ops[0]
    assert Backend().scratch_bytes(graph, op, 8) == {}
    plan = place(graph, {"ref": RefBackend()})
    assert kept_scratch(graph, plan.scratch_bytes, 8) == {}
    assert plan.fitter().options[0].scratch == 0


def test_each_buffer_counts_once_at_its_largest_and_adds_to_every_peak(graph):
    def scratch(op, rows):  # one shared buffer sized by the op's MACs, one per op
        return {"shared": op.macs // 100 * rows // graph.batch, f"own.{op.name}": 64}

    kept = kept_scratch(graph, scratch, graph.batch)
    assert kept["shared"] == max(op.macs for op in graph.ops) // 100
    assert sum(name.startswith("own.") for name in kept) == sum(not op.kind.endswith(".reshape") for op in graph.ops)
    plain, counted = Fitter(graph), Fitter(graph, scratch=scratch)
    for a, b in zip(
        sorted(plain.options, key=lambda o: (o.label, o.peak)),
        sorted(counted.options, key=lambda o: (o.label, o.peak - o.scratch)),
    ):
        assert b.peak - a.peak == b.scratch == sum(kept_scratch(graph, scratch, b.micro_batch).values())


@pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")
def test_cpu_scratch_comes_from_the_kernels_shapes_and_shrinks_with_the_slice():
    graph = lower(build_model("vgg_small"), dsptrain.load_recipe("niti"), 64)
    plan = place(graph, {"cpu": CpuBackend()})
    full, sliced = (kept_scratch(graph, plan.scratch_bytes, m) for m in (64, 4))
    assert any(part in name for name in full for part in ("im2col", "panels", "packed"))
    assert all(name.startswith("cpu:") for name in full)
    assert sum(sliced.values()) < sum(full.values())
    conv = next(op for op in graph.ops if op.kind.endswith("conv_fwd"))
    assert plan.backends["cpu"].scratch_bytes(graph, conv, 64)  # a product keeps something
    relu = next(op for op in graph.ops if op.kind.endswith("relu_fwd"))
    assert plan.backends["cpu"].scratch_bytes(graph, relu, 64) == {}
    chosen = plan.fitter().choose(None)
    assert chosen.scratch == sum(kept_scratch(graph, plan.scratch_bytes, chosen.micro_batch).values()) > 0


@pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")
def test_plan_command_counts_the_backends_scratch_in_peak_and_breakdown(tmp_path, capsys):
    from dsptrain.cli import main
    from dsptrain.memory.budget import format_size

    path = tmp_path / "run.yaml"
    path.write_text("recipe: niti\nmodel: {name: lenet5}\nmemory: {budget: 4MB}\n")
    graph = lower(build_model("lenet5"), dsptrain.load_recipe("niti"), 64)
    fitter = place(graph, {"cpu": CpuBackend()}).fitter()
    chosen = fitter.choose(4 << 20)
    assert chosen.scratch > 0
    assert main(["plan", str(path), "--batch", "64", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"peak {format_size(fitter.options[0].peak)} ({fitter.options[0].peak} bytes)" in out
    assert f"peak {format_size(chosen.peak)} ({chosen.peak} bytes)" in out
    scratch_lines = [line for line in out.splitlines() if "backend scratch (kept" in line]
    assert len(scratch_lines) == 2 and scratch_lines[1].split()[-2:] == format_size(chosen.scratch).split()
    assert f"backend scratch at the whole batch): {format_size(fitter.plain_peak())}" in out


@pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")
@pytest.mark.parametrize("name", ["niti", "octo", "wageubn", "afp", "mls", "fp8", "fp32"])
def test_planned_scratch_bounds_what_each_cpu_product_keeps(name):
    """Every product op declares its product (graph.Product), so the plan counts the CPU
    kernels' kept scratch for every recipe: run each product alone on the cpu backend at one
    thread and compare what it kept (release_scratch's bytes) with what the plan counted. The
    int8 products (NITI, Octo, WAGEUBN, AFP's 8-bit passes) keep what scratch.cpp sizes, give
    or take the few buffers it rounds up; MLS's int16 and FP8's FP16 products (their packed
    operands, gemm_exact.cpp) and FP32's convolutions (a block of patches, a padded image,
    conv_f32.cpp) keep exactly what the plan counts."""
    import dsptrain._cpu_ops as native
    import numpy as np
    from dsptrain.algorithms import algorithm_module
    from dsptrain.execute import Executor, StepContext

    recipe = dsptrain.load_recipe(name)
    algorithm, model = algorithm_module(recipe.module), build_model("lenet5")
    graph = lower(model, recipe, 8)
    backends = {"cpu": CpuBackend(), "ref": RefBackend()}
    plan, executor = place(graph, backends), Executor(backends, algorithm)
    rng = np.random.default_rng(0)
    env = dict(algorithm.init_params(model, recipe, rng))
    env["input"] = algorithm.prepare_input(rng.integers(0, 256, (8, 28, 28, 1), dtype=np.uint8))
    env["labels"] = rng.integers(0, 10, 8)
    ctx = StepContext(recipe, graph, 0, 0, 0, 8)
    products = [
        op
        for op in graph.ops
        if op.macs
        and plan.backend_of(op) == "cpu"
        and op.phase != "update"
        and (name != "fp32" or op.product is not None)
    ]  # FP32's linear layers: gemm_f32 keeps nothing
    assert {op.name for op in products} >= {"conv1.fwd", "conv2.bwd_data", "conv1.bwd_weight"}
    assert name == "fp32" or "fc1.fwd" in {op.name for op in products}
    assert all(op.product is not None for op in products), [op.name for op in products if op.product is None]
    threads = native.threads()
    native.set_threads(1)
    kept, planned = {}, {}
    try:
        for op in graph.ops:
            backends["cpu"].release_scratch()
            outputs, _ = executor.call(plan, op, env, ctx)
            env.update(outputs)
            if op in products:
                kept[op.name] = backends["cpu"].release_scratch()
                planned[op.name] = sum(n for buf, n in plan.scratch_bytes(op, 8).items() if buf.startswith("cpu:"))
    finally:
        native.set_threads(threads)
    if name in ("mls", "fp8", "fp32"):
        assert kept == planned and all(kept[n] > 0 for n in ("conv1.fwd", "conv2.bwd_data")), (kept, planned)
        return
    assert all(kept[n] <= planned[n] for n in kept), (kept, planned)
    assert sum(kept.values()) > 0
    assert sum(planned.values()) <= 1.05 * sum(kept.values()), (kept, planned)
