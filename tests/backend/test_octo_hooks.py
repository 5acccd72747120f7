"""Octo's faster hooks against ops_ref, bit for bit, on random and ragged shapes: the
quantizer on a step that is not a power of two (float32 lanes, the double division only
where a quotient lies near a rounding boundary) and one SGD call for a layer's parameters.
"""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.numerics import RngKey

from .conftest import available_backends

BACKENDS = [name for name in available_backends() if name != "dsp"]  # the DSP claims none of them
RAGGED = [(1,), (15,), (16,), (17,), (3, 5), (64, 6, 7, 3), (2, 33, 17), (70001,), (64, 28, 28, 6)]


@pytest.fixture(params=BACKENDS)
def be(request, make_backend):
    return make_backend(request.param)


def near_boundaries(rng, shape, step, share=0.2):
    """Normal values up to about 130 steps, a `share` of them put on a half step (a tie in
    double) or one float32 ulp beside it, where the float32 quotient alone could round
    the wrong way."""
    x = (rng.standard_normal(shape) * 40 * step).astype(np.float32)
    flat = x.reshape(-1)
    picked = rng.random(flat.size) < share
    halves = (rng.integers(-131, 131, picked.sum()) + 0.5) * step
    nudge = rng.integers(-1, 2, picked.sum())  # -1, 0, +1 ulp
    ties = halves.astype(np.float32)
    beside = np.nextafter(ties, np.where(nudge > 0, np.inf, -np.inf).astype(np.float32))
    flat[picked] = np.where(nudge == 0, ties, beside)
    return x


@pytest.mark.parametrize("shape", RAGGED)
@pytest.mark.parametrize("step", [0.0123456789, 1 / 127, 3.3e-5, 7.77])
def test_quantize_f_float_steps_near_rounding_boundaries(be, ref, shape, step):
    rng = np.random.default_rng(int(step * 1e6) % 1000 + len(shape))
    x = near_boundaries(rng, shape, step)
    flat = x.reshape(-1)
    if flat.size > 20:  # far out of range, zero, tiny, infinite
        flat[:8] = [0.0, -0.0, 1e-38, -3e-39, step * 1e9, -step * 127.5, np.inf, -np.inf]
    for bits, mode in [(8, "round"), (8, "nearest_even"), (16, "round"), (12, "nearest_even"), (8, "sto")]:
        key = RngKey(seed=3, step=bits, tensor_id=1, offset=2)
        got, want = be.quantize_f(x, step, bits, mode, key), ref.quantize_f(x, step, bits, mode, key)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=f"bits {bits} {mode}")


def test_quantize_f_float_steps_as_octo_takes_them(be, ref):
    """Octo's activation and weight steps (max|x| / 127) on tensors of LeNet-5's shapes."""
    rng = np.random.default_rng(5)
    for shape in [(64, 14, 14, 6), (16, 5, 5, 6), (120, 400), (64, 400)]:
        x = (rng.standard_normal(shape) * rng.uniform(0.01, 10)).astype(np.float32)
        step = float(np.max(np.abs(x))) / 127
        np.testing.assert_array_equal(
            be.quantize_f(x, step, 8, "round", None), ref.quantize_f(x, step, 8, "round", None)
        )


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_f32_group_is_sgd_f32_of_each(be, ref, nesterov):
    """A layer's weight and its compensation scale and shift (ragged sizes, one empty) in
    one call: each the bits of sgd_f32 alone, on this backend and on ref."""
    rng = np.random.default_rng(11)
    shapes = [(6, 5, 5, 1), (6,), (6,), (0,), (120, 400), (70001,), (7,)]
    params = [tuple((rng.standard_normal(s) * scale).astype(np.float32) for scale in (0.1, 0.01, 0.01)) for s in shapes]
    args = (0.05, 0.9, 5e-4, nesterov)
    got, want = be.sgd_f32_group(params, *args), ref.sgd_f32_group(params, *args)
    assert len(got) == len(want) == len(shapes)
    for (w, g, v), (gw, gv), (ww, wv) in zip(params, got, want):
        alone = ref.sgd_f32(w, g, v, *args)
        for a, b, c in zip((gw, gv), (ww, wv), alone):
            assert a.dtype == np.float32 and a.shape == w.shape
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(b, c)


def test_sgd_f32_group_names_a_bad_parameter(be):
    w = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="sgd_f32_group|shape|must"):
        be.sgd_f32_group([(w, w, w), (w, np.zeros(4, np.float32), w)], 0.1, 0.9, 0.0, False)


@pytest.mark.parametrize("shape", RAGGED)
def test_dequantize_reusing_the_sums(be, ref, shape):
    """A product's int32 sums dequantized with reuse: ref's bits; the CPU writes them over
    the sums' own memory (no second tensor), int64 sums and views get a new array."""
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    acc = rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)
    scale = 3.1e-7
    want = ref.dequantize(acc, scale)
    got = be.dequantize(acc.copy(), scale, True)
    assert got.dtype == np.float32 and got.shape == acc.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    if be.name == "cpu":
        mine = acc.copy()
        assert np.shares_memory(be.dequantize(mine, scale, True), mine)
        view = acc.copy()[..., ::-1]  # not its own memory: left alone
        out = be.dequantize(view, scale, True)
        assert not np.shares_memory(out, view)
        np.testing.assert_array_equal(out, ref.dequantize(view, scale))
    wide = acc.astype(np.int64) * 3
    np.testing.assert_array_equal(be.dequantize(wide, scale, True), ref.dequantize(wide, scale))


@pytest.mark.parametrize(
    "shape", [(64, 28, 28, 6), (64, 10, 10, 16), (64, 120), (64, 84), (5, 10), (3, 7), (1, 1), (2, 3, 17), (70001, 1)]
)
@pytest.mark.parametrize("wide", [False, True])
def test_dequantize_compensate_is_the_two_hooks(be, ref, shape, wide):
    """Octo's product epilogue in one pass: z and y the bits of dequantize then
    compensation_fwd (then relu_f32, with relu) on ref, int32 sums (the CPU's z over the
    sums' memory) and int64; zero sums against a -0.0 shift give -0.0 outputs."""
    rng = np.random.default_rng(shape[-1] * 31 + len(shape) + wide)
    acc = rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64)
    acc.reshape(-1)[::7] = 0
    acc = acc * 5 if wide else acc.astype(np.int32)
    channels = shape[-1]
    comp_scale = (rng.standard_normal(channels) * 0.1).astype(np.float32)
    comp_shift = (rng.standard_normal(channels) * 0.01).astype(np.float32)
    comp_shift[0] = -0.0
    scale = 2.7e-9
    want_z = ref.dequantize(acc, scale)
    want_y = ref.compensation_fwd(want_z, comp_scale, comp_shift)
    for reuse in (False, True):
        for relu in (False, True):
            mine = acc.copy()
            z, y = be.dequantize_compensate(mine, scale, comp_scale, comp_shift, reuse, relu)
            np.testing.assert_array_equal(z.view(np.uint32), want_z.view(np.uint32))
            np.testing.assert_array_equal(y.view(np.uint32), (ref.relu_f32(want_y) if relu else want_y).view(np.uint32))
            if be.name == "cpu":
                assert np.shares_memory(z, mine) == (reuse and not wide)


@pytest.mark.parametrize(
    "shape", [(64, 120), (64, 84), (64, 10), (5, 10), (3, 7), (1, 1), (2, 3, 17), (700, 6), (64, 28, 28, 6), (0, 4)]
)
def test_compensation_bwd_gated_by_a_relu(be, ref, shape):
    """The compensation backward with a following ReLU's backward folded in (gate: the ReLU's
    output): dz the bits of relu_bwd_f32 then compensation_bwd on ref; the channel sums the
    bits of the CPU's ungated call on the gated error, and within 1e-12 of ref's."""
    rng = np.random.default_rng(shape[-1] * 7 + len(shape))
    err = rng.standard_normal(shape).astype(np.float32)
    err.reshape(-1)[::5] = -0.0
    z = rng.standard_normal(shape).astype(np.float32)
    gate = np.maximum(rng.standard_normal(shape), 0).astype(np.float32)
    gate.reshape(-1)[::3] = -0.0
    scale = (rng.standard_normal(shape[-1]) * 0.1).astype(np.float32)
    gated = ref.relu_bwd_f32(err, gate)
    dz, d_scale, d_shift = be.compensation_bwd(err, z, scale, gate)
    want_dz, want_scale, want_shift = ref.compensation_bwd(gated, z, scale)
    np.testing.assert_array_equal(dz.view(np.uint32), want_dz.view(np.uint32))
    np.testing.assert_allclose(d_scale, want_scale, rtol=1e-12, atol=1e-30)
    np.testing.assert_allclose(d_shift, want_shift, rtol=1e-12, atol=1e-30)
    apart = be.compensation_bwd(gated, z, scale)
    for mine, theirs in zip((dz, d_scale, d_shift), apart):
        np.testing.assert_array_equal(mine.view(np.uint32), theirs.view(np.uint32))


def test_octo_lenet_linear_relus_go_into_their_layers():
    """fc1's and fc2's ReLUs read only their layer's compensated output: the product op
    writes the ReLU's output, the compensation backward takes the ReLU's output as its gate."""
    import dsptrain
    from dsptrain.graph import lower
    from dsptrain.models import build_model

    graph = lower(build_model("lenet5"), dsptrain.load_recipe("octo"), 8)
    kinds = {op.name: op for op in graph.ops}
    for layer, relu in (("fc1", "relu3"), ("fc2", "relu4")):
        assert f"{relu}.fwd" not in kinds and f"{relu}.bwd" not in kinds
        assert kinds[f"{layer}.fwd"].outputs == (f"{layer}.out", f"{relu}.out") and kinds[f"{layer}.fwd"].attrs["relu"]
        assert kinds[f"{layer}.comp_bwd"].inputs[-1] == f"{relu}.out"
        assert f"{layer}.comp.out" not in graph.tensors and f"err.{relu}" not in graph.tensors
    assert not kinds["fc3.fwd"].attrs.get("relu") and len(kinds["fc3.comp_bwd"].inputs) == 3
    assert all(op.kind != "fp32.relu_fwd" for op in graph.eval_ops)


def test_octo_lenet_has_no_separate_compensation_or_parameter_updates():
    """LeNet-5 under Octo: each product op applies its compensation layer, each layer has
    one update op for its weight and its compensation scale and shift."""
    import dsptrain
    from dsptrain.graph import lower
    from dsptrain.models import build_model

    graph = lower(build_model("lenet5"), dsptrain.load_recipe("octo"), 8)
    kinds = [op.kind for op in graph.ops]
    assert kinds.count("octo.product_comp") == 5 and "octo.comp_fwd" not in kinds
    updates = [op for op in graph.ops if op.phase == "update"]
    assert len(updates) == 5
    for op in updates:
        assert op.inputs[0] == f"{op.layer}.w" and f"{op.layer}.comp_scale" in op.inputs
        assert op.outputs == (
            f"{op.layer}.w",
            f"{op.layer}.w.v",
            f"{op.layer}.comp_scale",
            f"{op.layer}.comp_scale.v",
            f"{op.layer}.comp_shift",
            f"{op.layer}.comp_shift.v",
        )
