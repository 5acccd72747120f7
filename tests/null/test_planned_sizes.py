"""The memory plan sizes every tensor a step writes at least as large as it is: each value a
training step puts into the environment has no more bytes than the graph's TensorSpec the
planner placed (an arena slot of that size, or the peak it reports). The emulated recipes'
quantized operands are int8 only for 8-bit grids: MLS's group-shifted elements are int16,
FP8's grid values float32, AFP's errors int16 once a layer widens to 16 bits."""

import dataclasses

import dsptrain
import numpy as np
import pytest
from dsptrain.algorithms import algorithm_module
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.execute import Executor, StepContext
from dsptrain.graph import lower
from dsptrain.models import build_model
from dsptrain.numerics import QTensor
from dsptrain.plan import place


def _one_step(recipe, batch=4):
    """{tensor: (planned bytes, planned dtype, written bytes, written dtype)} of one
    training step of LeNet-5 under `recipe` on the NumPy backend."""
    algorithm, model = algorithm_module(recipe.module), build_model("lenet5")
    graph = lower(model, recipe, batch)
    backends = {"ref": RefBackend()}
    plan, executor = place(graph, backends), Executor(backends, algorithm)
    rng = np.random.default_rng(1)
    env = dict(algorithm.init_params(model, recipe, rng))
    env["input"] = algorithm.prepare_input(rng.integers(0, 256, (batch, 28, 28, 1), dtype=np.uint8))
    env["labels"] = rng.integers(0, 10, batch)
    executor.run(plan, env, StepContext(recipe, graph, 0, 0, 0, batch), threaded=False)
    written = {}
    for name, spec in graph.tensors.items():
        if name not in env:
            continue
        value = env[name]
        array = np.asarray(value.q if isinstance(value, QTensor) else getattr(value, "q", value))
        written[name] = (spec.nbytes, spec.dtype, array.nbytes, str(array.dtype))
    return written


@pytest.mark.parametrize("name", ["niti", "octo", "wageubn", "afp", "mls", "fp8", "fp32"])
def test_every_tensor_a_step_writes_fits_its_planned_size(name):
    written = _one_step(dsptrain.load_recipe(name))
    assert written
    larger = {t: w for t, w in written.items() if w[2] > w[0]}
    assert not larger, f"{name}: written larger than planned (planned bytes, dtype, written bytes, dtype): {larger}"


def test_emulated_quantized_operands_are_planned_at_their_element_size():
    sizes = {name: _one_step(dsptrain.load_recipe(name)) for name in ("octo", "mls", "fp8")}
    assert {sizes["octo"][t][1] for t in ("conv1.xq", "fc1.wq", "conv2.eq")} == {"int8"}
    assert {sizes["mls"][t][1] for t in ("conv1.xq", "fc1.wq", "conv2.eq")} == {"int16"}
    assert {sizes["fp8"][t][1] for t in ("conv1.xq", "fc1.wq", "conv2.eq")} == {"float32"}
    for t in ("conv1.xq", "fc1.wq", "conv2.eq"):  # the same shapes: 2x and 4x an int8 tensor's bytes
        assert sizes["mls"][t][0] == 2 * sizes["octo"][t][0] and sizes["fp8"][t][0] == 4 * sizes["octo"][t][0]


def test_afp_errors_are_planned_at_16_bits_and_fit_when_a_layer_widens():
    recipe = dsptrain.load_recipe("afp")
    # a threshold nothing stays under: every layer switches its errors to high_bits at the first check
    wide = dataclasses.replace(recipe, params={**recipe.params, "error_threshold": 1e-12})
    written = _one_step(wide)
    errors = {t: w for t, w in written.items() if t.endswith(".eq")}
    assert errors and all(w[3] == "int16" for w in errors.values()), errors
    assert all(w[1] == "int16" and w[2] <= w[0] for w in errors.values()), errors
    narrow = dataclasses.replace(recipe, params={**recipe.params, "high_bits": 8})
    assert {w[1] for t, w in _one_step(narrow).items() if t.endswith(".eq")} == {"int8"}


def _allocated_per_op(recipe, batch, seed):
    """(graph, plan, {op name: bytes it allocated while it ran}) of one LeNet-5 training
    step under `recipe` on the cpu backend (NumPy arrays, traced by tracemalloc), op by op."""
    import tracemalloc

    from dsptrain.backends.ops_cpu import CpuBackend

    if not CpuBackend.available()[0]:
        pytest.skip("cpu backend not built")
    algorithm, model = algorithm_module(recipe.module), build_model("lenet5")
    graph = lower(model, recipe, batch)
    backends = {"cpu": CpuBackend(), "ref": RefBackend()}
    plan, executor = place(graph, backends), Executor(backends, algorithm)
    rng = np.random.default_rng(seed)
    env = dict(algorithm.init_params(model, recipe, rng))
    env["input"] = algorithm.prepare_input(rng.integers(0, 256, (batch, 28, 28, 1), dtype=np.uint8))
    env["labels"] = rng.integers(0, 10, batch)
    ctx = StepContext(recipe, graph, 0, 0, 0, batch)
    measured = {}
    tracemalloc.start()
    try:
        for op in graph.ops:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            outputs, _ = executor.call(plan, op, env, ctx)
            measured[op.name] = tracemalloc.get_traced_memory()[1] - before
            env.update(outputs)
    finally:
        tracemalloc.stop()
    return graph, plan, measured


def _kept_by_recipe(plan, op, batch) -> int:
    """What the recipe keeps from `op` between ops (its `recipe:` scratch buffers)."""
    return sum(n for buf, n in plan.scratch_bytes(op, batch).items() if buf.startswith("recipe:"))


@pytest.mark.parametrize("name", ["mls", "fp8", "octo"])
def test_the_emulated_products_workspace_is_what_they_allocate(name):
    """What each layer product allocates while it runs on the cpu backend (NumPy arrays,
    traced by tracemalloc: patches, transposed weights, exact sums, the scattered image,
    the result) against the plan's op workspace (memory.planner.op_workspace with the
    recipe's declared `workspace`) and what the recipe keeps from the op: never more, and
    at most half above it (the plan adds up arrays a product frees before its peak). MLS's
    conv patches are both the forward's workspace and the patch cache's kept entry (counted
    twice while the forward runs), and its weight gradients reuse them: there the plan is
    only checked to be enough."""
    from dsptrain.memory.planner import op_workspace

    batch = 16
    graph, plan, measured = _allocated_per_op(dsptrain.load_recipe(name), batch, seed=2)
    products = [op for op in graph.ops if op.kind.endswith((".product", ".product_comp"))]  # Octo's: + its layer
    assert len(products) == 14  # 5 forward, 5 weight-gradient, 4 backward-data (none into the input)
    for op in products:
        # the op's workspace, and what the recipe keeps from it (MLS's patch cache entry)
        planned, got = op_workspace(graph, op, batch) + _kept_by_recipe(plan, op, batch), measured[op.name]
        assert got <= planned * 1.02 + 4096, f"{name} {op.name}: allocated {got} bytes, planned {planned}"
        if not (name == "mls" and op.name.startswith("conv")):  # the cached patches: see above
            assert planned <= got * 1.5 + 4096, f"{name} {op.name}: planned {planned} bytes, allocated {got}"


@pytest.mark.parametrize("name", ["niti", "octo", "wageubn", "afp", "afp-16", "mls", "fp8", "fp32"])
def test_no_op_allocates_more_than_its_planned_workspace(name):
    """Every op of a LeNet-5 step on the cpu backend (NumPy arrays it allocates while it runs,
    traced by tracemalloc) against the plan's op workspace (memory.planner.op_workspace):
    never more. The quantizers' and updates' NumPy temporaries (AFP's width check, FP8's
    weight grid, FP8's float64 update), the loss's, AFP's int16 copies of
    int8 operands against 16-bit errors ("afp-16": every layer's errors widened) and the
    transposed copies of the linear layers are counted."""
    from dsptrain.memory.planner import op_workspace

    batch, recipe = 32, dsptrain.load_recipe(name.split("-")[0])
    if name == "afp-16":  # a threshold nothing stays under: errors go to 16 bits at the first check
        recipe = dataclasses.replace(recipe, params={**recipe.params, "error_threshold": 1e-12})
    graph, plan, measured = _allocated_per_op(recipe, batch, seed=4)
    over = {}
    for op in graph.ops:
        got, planned = measured[op.name], op_workspace(graph, op, batch) + _kept_by_recipe(plan, op, batch)
        if got > planned * 1.02 + 4096:
            over[op.name] = (got, planned)
    assert not over, f"{name}: ops allocated more than planned (allocated, planned bytes): {over}"


def test_float_maxpool_backward_allocates_only_its_result():
    """maxpool_bwd_f32 (FP32 and the emulated recipes' pooling) allocates the input-sized
    error it returns and nothing else (it allocated a second input-sized array to check the
    shapes, twice what the plan's op workspace counts)."""
    import tracemalloc

    from dsptrain.backends.ops_cpu import CpuBackend

    if not CpuBackend.available()[0]:
        pytest.skip("cpu backend not built")
    be, rng = CpuBackend(), np.random.default_rng(3)
    err = rng.standard_normal((32, 12, 12, 6)).astype(np.float32)
    argmax = rng.integers(0, 4, err.shape).astype(np.uint8)
    tracemalloc.start()
    try:
        dx = be.maxpool_bwd_f32(err, argmax, 2, 2, (24, 24))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert dx.shape == (32, 24, 24, 6) and peak <= dx.nbytes + 4096, (peak, dx.nbytes)
