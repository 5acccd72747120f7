"""The native forms of the emulated recipes' float work (Octo's range-clipping search and
compensation, WAGEUBN's update, power-of-two quantizers) against ops_ref, on the shapes
and value patterns training gives them (errors behind ReLU and max-pool are mostly
zeros), ragged sizes, and at one and two threads (results may not depend on the count).

Bit-exact unless stated: PRC's squared errors are float64 sums within 1e-12 relative
(their order is the backend's), the compensation's channel sums float32 within 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain import _cpu_ops as native
from dsptrain import float_ops
from dsptrain.algorithms import _quant
from dsptrain.numerics import RngKey

from .conftest import available_backends

BACKENDS = [name for name in available_backends() if name != "dsp"]
RATIOS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)


@pytest.fixture(params=BACKENDS)
def be(request, make_backend):
    return make_backend(request.param)


def sparse_errors(rng, shape, zeros=0.87, scale=1e-3):
    """Backward errors as LeNet-5's conv layers see them: about 87 % exact zeros."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    x[rng.random(shape) < zeros] = 0.0
    return x


def at_threads(count, fn):
    """fn() with the native pool at `count` threads and every size split across them."""
    threads = native.threads()
    try:
        native.set_threads(count)
        return fn()
    finally:
        native.set_threads(threads)


# ---------------------------------------------------------------- Octo: PRC and compensation


@pytest.mark.parametrize("shape", [(64, 28, 28, 6), (64, 10, 10, 16), (3, 70001), (17,), (5, 33)])
@pytest.mark.parametrize("zeros", [0.0, 0.87, 1.0])
def test_prc_squared_errors_of_sparse_errors(be, ref, shape, zeros):
    x = sparse_errors(np.random.default_rng(len(shape) + int(zeros * 100)), shape, zeros)
    x.reshape(-1)[-1] = 5e-3 if zeros == 1.0 else x.reshape(-1)[-1]  # one nonzero at the very end
    top = ref.absmax_f(x)
    got, want = be.prc_squared_errors(x, top, RATIOS, 127), ref.prc_squared_errors(x, top, RATIOS, 127)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert int(np.argmin(got)) == int(np.argmin(want))


def test_prc_squared_errors_same_at_one_and_two_threads():
    x = sparse_errors(np.random.default_rng(3), (64, 28, 28, 6))
    top = float(np.max(np.abs(x)))
    one = at_threads(1, lambda: native.prc_squared_errors(x, top, list(RATIOS), 127))
    two = at_threads(2, lambda: native.prc_squared_errors(x, top, list(RATIOS), 127))
    assert list(one) == list(two)


@pytest.mark.parametrize(
    "shape", [(64, 28, 28, 6), (64, 10, 10, 16), (7, 3, 10), (64, 120), (5, 200), (9, 1), (2, 3), (3, 4, 5, 7)]
)
def test_compensation_bwd_ragged_channels(be, ref, shape):
    rng = np.random.default_rng(shape[-1])
    err, z = sparse_errors(rng, shape, 0.5, 1.0), rng.standard_normal(shape).astype(np.float32)
    scale = (rng.standard_normal(shape[-1:]) * 0.1).astype(np.float32)
    got, want = be.compensation_bwd(err, z, scale), ref.compensation_bwd(err, z, scale)
    np.testing.assert_array_equal(got[0], want[0])
    for g, w in zip(got[1:], want[1:]):
        assert g.dtype == np.float32 and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-12)


def test_compensation_bwd_same_at_one_and_two_threads():
    rng = np.random.default_rng(11)
    err, z = sparse_errors(rng, (64, 28, 28, 6), 0.5, 1.0), rng.standard_normal((64, 28, 28, 6)).astype(np.float32)
    scale = (rng.standard_normal(6) * 0.1).astype(np.float32)
    one = at_threads(1, lambda: native.compensation_bwd(err, z, scale))
    two = at_threads(2, lambda: native.compensation_bwd(err, z, scale))
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- power-of-two quantizers


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("exponent", [-140, -30, -7, 0, 5, 100])
def test_quantize_f_power_of_two_steps(be, ref, dtype, exponent):
    """A power-of-two step is taken as a multiply by its inverse: the same integers as the
    division, ties, clipping and values far below the step included."""
    rng = np.random.default_rng(exponent + 200)
    step = 2.0**exponent
    codes = rng.integers(-300, 300, size=(3, 1001)) / 2.0  # halves: ties either way
    x = (codes * step * (1 + rng.uniform(-1e-7, 1e-7, codes.shape) * (rng.random(codes.shape) < 0.3))).astype(dtype)
    x.reshape(-1)[:7] = [0.0, -0.0, step * 1e-30, -step * 1e-30, step * 126.5, -step * 127.5, step * 1e6]
    for i, (bits, mode) in enumerate([(8, "round"), (8, "nearest_even"), (8, "sto"), (16, "round"), (12, "sto")]):
        key = RngKey(seed=5, step=i, tensor_id=3, offset=7)
        np.testing.assert_array_equal(
            be.quantize_f(x, step, bits, mode, key),
            ref.quantize_f(x, step, bits, mode, key),
            err_msg=f"bits {bits} {mode}",
        )


# ---------------------------------------------------------------- WAGEUBN's update


def update_case(rng, shape, e=-20, grad_scale=1e-3):
    q = rng.integers(-(2**23) + 1, 2**23, size=shape).astype(np.int32)
    grad = (rng.standard_normal(shape) * grad_scale).astype(np.float32)
    m = (rng.integers(-(2**15) + 1, 2**15, size=shape) * 2.0**-22).astype(np.float32)
    return q, e, grad, m


@pytest.mark.parametrize(
    "shape", [(6, 5, 5, 1), (16, 5, 5, 6), (120, 400), (84, 120), (10, 84), (1,), (7, 3), (70001,)]
)
def test_wageubn_update(be, ref, shape):
    rng = np.random.default_rng(int(np.prod(shape)) % 1000)
    q, e, grad, m = update_case(rng, shape)
    key = RngKey(seed=1, step=9, tensor_id=4)
    args = (0.046875, 0.890625, 5e-4, 8, 16, 24, key)
    got, want = be.wageubn_update(q, e, grad, m, *args), ref.wageubn_update(q, e, grad, m, *args)
    for g, w, dtype in zip(got, want, (np.int32, np.float32)):
        assert g.dtype == w.dtype == dtype and g.shape == shape
        np.testing.assert_array_equal(g, w)


def test_wageubn_update_edges(be, ref):
    """All-zero gradient and momentum (grids of range 0), weights at the accumulator's
    limit (clipped), ranges exactly a power of two, and one just above it (where a
    rounded log2 would give the smaller exponent)."""
    key = RngKey(seed=2, step=1, tensor_id=1)
    q = np.array([2**23 - 1, -(2**23 - 1), 5, 0], np.int32)
    zero = np.zeros(4, np.float32)
    for grad, m, decay in [
        (zero, zero, 0.0),
        (np.array([2.0**-8, 0, -(2.0**-9), 0], np.float32), zero, 0.0),
        (np.array([np.float32(2.0**-8) * np.float32(1 + 2**-23), 0, 1e-5, 0], np.float32), zero, 0.0),
        (np.array([1.0, -1.0, 0.5, 0], np.float32), np.array([1, -1, 0, 0.25], np.float32), 5e-4),
    ]:
        args = (q, -20, grad, m, 0.5, 0.890625, decay, 8, 16, 24, key)
        for g, w in zip(be.wageubn_update(*args), ref.wageubn_update(*args)):
            np.testing.assert_array_equal(g, w)


def test_wageubn_update_same_at_one_and_two_threads():
    q, e, grad, m = update_case(np.random.default_rng(4), (120, 400))
    key = (1, 2, 3, 0)
    run = lambda: native.wageubn_update(q, e, grad, m, 0.046875, 0.890625, 5e-4, 8, 16, 24, key)  # noqa: E731
    for a, b in zip(at_threads(1, run), at_threads(2, run)):
        np.testing.assert_array_equal(a, b)


def test_wageubn_update_is_the_recipes_grids(ref):
    """The judge equals the update written with the recipe's own quantizer
    (_quant.quantize_int's hook calls made on ref): gradient grid, momentum grid, weight step."""
    q, e, grad, m = update_case(np.random.default_rng(8), (84, 120))
    key = RngKey(seed=3, step=2, tensor_id=5)
    lr, momentum, decay = 0.046875, 0.890625, 5e-4
    current = q.astype(np.float64) * 2.0**e
    g = _quant.quantize_int(ref, grad.astype(np.float64) + decay * current, 8, "pow2", "sto", key).values()
    m_new = _quant.quantize_int(ref, momentum * m.astype(np.float64) + g, 16, "pow2", "round").values()
    q_new = np.clip(q - np.rint(lr * m_new / 2.0**e), -(2**23 - 1), 2**23 - 1).astype(np.int32)
    got = ref.wageubn_update(q, e, grad, m, lr, momentum, decay, 8, 16, 24, key)
    np.testing.assert_array_equal(got[0], q_new)
    np.testing.assert_array_equal(got[1], m_new.astype(np.float32))


def test_ceil_log2_is_exact():
    assert [float_ops.ceil_log2(v) for v in (1.0, 2.0, 3.0, 0.75, 2.0**-1074, 2.0**1023)] == [0, 1, 2, 0, -1074, 1023]
    just_above = 2.0**8 * (1 + 2.0**-52)  # np.log2 rounds this to 8.0
    assert float_ops.ceil_log2(just_above) == 9 and _quant.pow2_exponent(just_above, 8) == 2


# ---------------------------------------------------------------- Octo's error quantizer


@pytest.mark.parametrize("shape", [(64, 28, 28, 6), (64, 10, 10, 16), (64, 120), (64, 10), (3, 70001), (17,), (0, 4)])
@pytest.mark.parametrize("zeros", [0.0, 0.87, 1.0])
@pytest.mark.parametrize("bits, mode", [(8, "round"), (8, "nearest_even"), (8, "sto"), (12, "round")])
def test_prc_quantize(be, ref, shape, zeros, bits, mode):
    """The range, the ratio search and the quantizer in one hook: the same ratio, step and
    codes as the judge (whose search is prc_squared_errors + np.argmin)."""
    x = sparse_errors(np.random.default_rng(int(np.prod(shape)) % 1000 + bits), shape, zeros)
    key = RngKey(seed=4, step=2, tensor_id=9, offset=1)
    got, want = (b.prc_quantize(x, 0.7, 0.1, RATIOS, bits, mode, key) for b in (be, ref))
    assert got[1:] == want[1:]  # step, ratio
    assert got[0].dtype == want[0].dtype == (np.int8 if bits <= 8 else np.int16)
    np.testing.assert_array_equal(got[0], want[0])


def test_prc_quantize_matches_the_search_and_the_quantizer(be, ref):
    """prc_quantize is prc_squared_errors' choice, the moving average, then quantize_f."""
    x = sparse_errors(np.random.default_rng(21), (64, 10, 10, 16))
    top = ref.absmax_f(x)
    best = RATIOS[int(np.argmin(be.prc_squared_errors(x, top, RATIOS, 127)))]
    ratio = 0.9 * 0.55 + 0.1 * best
    q, step, got_ratio = be.prc_quantize(x, 0.55, 0.1, RATIOS, 8, "round", None)
    assert got_ratio == ratio and step == ratio * top / 127
    np.testing.assert_array_equal(q, ref.quantize_f(x, ratio * top / 127, 8, "round", None))


def test_prc_quantize_same_at_one_and_two_threads():
    x = sparse_errors(np.random.default_rng(6), (64, 28, 28, 6))
    run = lambda: native.prc_quantize(x, 0.8, 0.1, list(RATIOS), 8, "round", None)  # noqa: E731
    one, two = at_threads(1, run), at_threads(2, run)
    assert one[1:] == two[1:]
    np.testing.assert_array_equal(one[0], two[0])
