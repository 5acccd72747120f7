"""Recipe pieces beyond the number grids: Octo's compensation layer, WAGEUBN's integer
batch norm, NITI's residual add and average pool, ResNet lowering, recipe params."""

import subprocess
import sys

import dsptrain
import numpy as np
import pytest
from dsptrain.algorithms import _float_layers as fl
from dsptrain.algorithms.wageubn import BN_GRIDS, on_grid
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.errors import ConfigError
from dsptrain.float_ops import compensation_bwd as compensation_backward
from dsptrain.float_ops import compensation_fwd as compensation_forward
from dsptrain.graph import lower
from dsptrain.models import build_model

RECIPES = ("niti", "fp32", "octo", "wageubn", "afp", "mls", "fp8")


def numeric_gradient(f, x, eps=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[i] += eps
        minus[i] -= eps
        grad[i] = (f(plus) - f(minus)) / (2 * eps)
    return grad


def test_compensation_layer_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    z, scale, shift = rng.normal(size=(3, 2, 2, 4)), rng.normal(size=4) * 0.1, rng.normal(size=4) * 0.1
    weights = rng.normal(size=z.shape)  # loss = sum(weights * y), so dL/dy = weights
    loss = lambda z_, s_, b_: float(np.sum(weights * (z_ * (1 + s_) + b_)))
    dz, ds, db = compensation_backward(weights.astype(np.float32), z, scale)
    np.testing.assert_allclose(dz, numeric_gradient(lambda v: loss(v, scale, shift), z), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ds, numeric_gradient(lambda v: loss(z, v, shift), scale), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, numeric_gradient(lambda v: loss(z, scale, v), shift), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compensation_forward(z, np.zeros(4), np.zeros(4)), z, rtol=1e-6)  # starts as identity


def float64_batch_norm(x, gamma, beta):
    mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    return gamma * (x - mean) / np.sqrt(var + fl.BN_EPS) + beta


def test_float_batch_norm_backward_matches_finite_differences():
    rng = np.random.default_rng(1)
    x, gamma, beta = rng.normal(size=(4, 3, 3, 2)), 1 + rng.normal(size=2) * 0.1, rng.normal(size=2)
    weights = rng.normal(size=x.shape)
    y, xhat, inv, _, _ = fl.bn_forward_values(x, gamma, beta, np.zeros(2), np.ones(2), True)
    np.testing.assert_allclose(y, float64_batch_norm(x, gamma, beta), rtol=1e-10)
    dx, dg, db = fl.bn_backward_values(weights, xhat, inv, gamma)
    loss = lambda x_, g_, b_: float(np.sum(weights * float64_batch_norm(x_, g_, b_)))
    np.testing.assert_allclose(dx, numeric_gradient(lambda v: loss(v, gamma, beta), x), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(dg, numeric_gradient(lambda v: loss(x, v, beta), gamma), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(db, numeric_gradient(lambda v: loss(x, gamma, v), beta), rtol=1e-4, atol=1e-6)


def on_pow2_grid(values, bits):
    step = 2.0 ** (np.ceil(np.log2(np.abs(values).max())) - (bits - 1))
    return np.allclose(values / step, np.round(values / step)) and np.abs(values / step).max() <= 2 ** (bits - 1) - 1


def test_integer_batch_norm_stays_on_its_grids_and_near_float64():
    rng = np.random.default_rng(2)
    x = np.round(rng.normal(size=(8, 4, 4, 3)) * 40) / 16  # activations on a fixed-point grid
    gamma, beta = np.array([1.0, 0.7, 1.3]), np.array([0.1, -0.2, 0.0])
    y, xhat, inv, _, _ = fl.bn_forward_values(x, gamma, beta, np.zeros(3), np.ones(3), True, BN_GRIDS)
    assert on_pow2_grid(xhat, 16) and on_pow2_grid(inv, 16)
    g8, b8 = on_grid(gamma, 8), on_grid(beta, 8)
    assert on_pow2_grid(g8, 8) and on_pow2_grid(b8, 8)
    np.testing.assert_allclose(y, g8 * xhat + b8, rtol=1e-12)
    exact = float64_batch_norm(x, gamma, beta)
    assert np.abs(y - exact).max() < 0.02  # 8-bit gamma/beta dominate the difference
    err = rng.normal(size=x.shape)
    dx, dg, db = fl.bn_backward_values(err, xhat, inv, gamma, BN_GRIDS)
    dx_f, dg_f, db_f = fl.bn_backward_values(err, *fl.bn_forward_values(x, gamma, beta, 0, 1, True)[1:3], gamma)
    e8 = on_grid(err, 8)
    np.testing.assert_allclose(db, e8.sum(axis=(0, 1, 2)))  # the incoming error is 8-bit
    assert np.abs(dx - dx_f).max() < 0.05 * np.abs(dx_f).max()
    assert np.abs(dg - dg_f).max() < 0.05 * np.abs(dg_f).max()


def test_residual_add_aligns_on_the_coarser_exponent():
    be = RefBackend()
    a = np.array([100, -50, 3, 127], np.int8)  # exponent -4
    b = np.array([64, 64, -7, 127], np.int8)  # exponent -6: the finer, shifted right by 2
    q, e = be.add_align_s8(a, -4, b, -6, "round", None)
    exact = a * 2.0**-4 + b * 2.0**-6
    assert e == -3  # 127 + 32 = 159 needs one more bit
    assert np.abs(q * 2.0**e - exact).max() <= 2.0**-3  # within one step of the result's grid
    np.testing.assert_array_equal(q, [58, -17, 1, 80])  # (100+16)/2, (-50+16)/2, (3-2)/2, (127+32)/2: halves round up
    q2, e2 = be.add_align_s8(b, -6, a, -4, "round", None)  # order does not matter
    np.testing.assert_array_equal(q2, q)
    assert e2 == e
    same, e3 = be.add_align_s8(np.array([3], np.int8), 0, np.array([4], np.int8), 0, "round", None)
    assert same.tolist() == [7] and e3 == 0


def test_integer_global_average_pool_divides_by_shifting_the_exponent():
    be = RefBackend()
    x = np.random.default_rng(3).integers(-127, 128, size=(2, 4, 4, 3)).astype(np.int8)
    q, e = be.avgpool_global_s8(x, -5, "round", None)
    exact = x.astype(np.float64).mean(axis=(1, 2)) * 2.0**-5
    assert np.abs(q * 2.0**e - exact).max() <= 2.0 ** (e - 1)
    with pytest.raises(ValueError, match="not a power of two"):
        be.avgpool_global_s8(np.zeros((1, 3, 3, 1), np.int8), 0, "round", None)


@pytest.mark.parametrize("name,blocks,convs", [("resnet18", 8, 21), ("resnet34", 16, 37)])
def test_resnet_lowering_shapes(name, blocks, convs):
    model = build_model(name)
    assert model.input_shape == (32, 32, 3) and model.shapes()[-2:] == [(512,), (10,)]
    graph = lower(model, dsptrain.load_recipe("octo"), 2)
    t = graph.tensors
    assert t["conv1.out"].shape == (2, 32, 32, 64)  # CIFAR stem: no max-pool
    assert t["layer2.0.short.out"].shape == (2, 16, 16, 128)  # strided 1x1 shortcut
    assert t["layer4.0.conv1.w"].shape == (512, 3, 3, 256)
    assert t["avgpool.out"].shape == (2, 512)
    assert sum(1 for op in graph.ops if op.kind == "octo.add") == blocks
    assert sum(1 for op in graph.ops if op.name.endswith(".quant_w")) == convs  # convs and the fc
    # every block input is read twice (main path and shortcut): its errors are joined
    joins = [op for op in graph.ops if op.kind == "octo.join"]
    assert len(joins) == blocks and all(len(op.inputs) == 2 for op in joins)
    assert "err.conv1" not in t  # no error into the input


def test_niti_resnet_without_bn_joins_integer_errors_with_alignment():
    graph = lower(build_model("resnet18_nobn"), dsptrain.load_recipe("niti"), 2)
    joins = [op for op in graph.ops if op.kind == "niti.join"]
    assert len(joins) == 8 and all(op.hooks == ("add_align_s8",) for op in joins)
    assert graph.tensors["avgpool.out"].dtype == "int8"


def test_niti_runs_batch_norm_in_float_between_int8_products():
    """Mixed precision (algorithms/int_mixed.py): the products stay int8, batch norm reads
    float32 through a cast -- or, between int8 tensors, runs with its casts and ReLU as one
    op (algorithms/int_fused.py) -- and every error has its tensor's dtype."""
    from dsptrain import precision

    model = build_model("resnet18")
    graph = lower(model, dsptrain.load_recipe("niti"), 2)
    formats = precision.layer_formats(graph)
    assert {formats[layer.name] for layer in model.layers if type(layer).__name__ in ("Conv2d", "Linear")} == {
        "integer"
    }
    assert {formats[layer.name] for layer in model.layers if type(layer).__name__ == "BatchNorm2d"} == {
        "float",
        "fused",
    }
    bn = graph.op("layer1.0.bn2.fwd")  # its output meets the residual add: float
    assert bn.kind == "fp32.bn_fwd" and graph.tensors[bn.inputs[0]].dtype == "float32"
    assert graph.op(f"{bn.inputs[0]}.cast").kind == "niti.to_float"
    fused = graph.op("layer1.0.bn1.fwd")  # between two int8 convolutions: with its ReLU, int8 in and out
    assert fused.kind == "niti.bn_act_fwd" and fused.attrs["act"] == ("relu",)
    assert graph.tensors[fused.inputs[0]].dtype == graph.tensors[fused.outputs[0]].dtype == "int8"
    assert graph.op("conv1.fwd").kind == "niti.conv_fwd"
    for op in graph.ops:  # integer ops read and write no float tensor, float ones no int8 tensor
        dtypes = {graph.tensors[t].dtype for t in (*op.inputs, *op.outputs)} - {"int64", "int32", "uint8", "bool"}
        if op.attrs.get("fused"):  # int8 activations and errors, float parameters and statistics
            assert dtypes == {"int8", "float32", "float64"}, (op, dtypes)
        elif not precision.is_cast(op):
            assert dtypes == ({"int8"} if op.kind.startswith("niti.") else {"float32"}), (op, dtypes)
    summary = precision.summary(graph, model)
    assert any(line.startswith("casts ") for line in summary)
    assert any(line.startswith("fused ") and "niti.bn_act_fwd" in line for line in summary)
    # NITI's errors are per sample (no 1/N): gamma's and beta's SGD takes the rate over the batch
    float_updates = [op for op in graph.ops if op.kind == "fp32.sgd"]
    assert len(float_updates) == 40 and {op.attrs["lr_divisor"] for op in float_updates} == {2}
    assert {
        op.attrs.get("lr_divisor", 1)
        for op in lower(model, dsptrain.load_recipe("fp32"), 2).ops
        if op.kind == "fp32.sgd"
    } == {1}


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_lowers_lenet(recipe):
    graph = lower(build_model("lenet5"), dsptrain.load_recipe(recipe), 4)
    assert graph.ops[-1].phase == "update"


@pytest.mark.parametrize(
    "recipe,key,value",
    [
        ("octo", "prc_momentum", 2.0),
        ("octo", "bogus", 1),
        ("fp8", "loss_scale", 1000),
        ("afp", "high_bits", 40),
        ("mls", "group_bits", 9),
        ("wageubn", "first_last", "fp16"),
    ],
)
def test_bad_recipe_params_name_the_key(recipe, key, value):
    with pytest.raises(ConfigError, match=f"params.{key}"):
        dsptrain.load_recipe(recipe, {"params": {key: value}})


def test_recipes_command_lists_every_recipe_with_its_formats():
    out = subprocess.run([sys.executable, "-m", "dsptrain.cli", "recipes"], capture_output=True, text=True, check=True)
    lines = {line.split()[0]: line for line in out.stdout.splitlines()}
    assert set(RECIPES) <= set(lines)
    assert "W fp8(1-5-2)" in lines["fp8"] and "E int8..16" in lines["afp"] and "group16" in lines["mls"]
    assert "U int24" in lines["wageubn"] and "niti_int_ce" in lines["niti"]


@pytest.mark.parametrize("rounding", ["round", "psto", "sto"])
def test_niti_casts_round_by_the_roles_mode(rounding, tmp_path):
    """A float layer's output cast to int8 takes the role's rounding; psto (drawn from an
    integer's discarded bits) casts a float as sto."""
    errors = {
        "format": "int",
        "bits": 8,
        "scale": "pow2",
        "granularity": "tensor",
        "rounding": rounding,
        "rescale": {"policy": "dynamic"},
    }
    path = tmp_path / "r.yaml"
    path.write_text(
        "name: r\nbackend: ref\nenergy: estimate\nmodel: {name: lenet5_bn}\n"
        "data: {dataset: synthetic, train_limit: 16, test_limit: 16}\ntrain: {epochs: 1, batch_size: 8}\n"
        f"recipe: {{name: niti, tensors: {{errors: {errors}}}}}\n".replace("'", "")
    )
    run = dsptrain.load_run(path)
    casts = [  # the casts, and the fused batch norms' (algorithms/int_fused.py)
        op
        for op in lower(build_model("lenet5_bn"), run.recipe, 8).ops
        if op.kind in ("niti.to_int8", "niti.bn_act_bwd")
    ]
    assert {op.attrs["mode"] for op in casts if op.phase == "backward"} == {"sto" if rounding == "psto" else rounding}
    trainer = dsptrain.Trainer(run, progress=False, out_dir=tmp_path / "out")
    try:
        images = np.random.default_rng(0).integers(0, 256, (8, 28, 28, 1)).astype(np.uint8)
        assert np.isfinite(trainer.step(images, np.arange(8) % 10).loss)
    finally:
        trainer.close()
