"""The reference backend's integer ops against float64 math on the same integers,
and NITI's integer loss gradient against the float softmax gradient."""

import numpy as np
import pytest
from dsptrain import numerics
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.numerics import LOSS_EXPONENT, RngKey

ref = RefBackend()


def direct_conv(x, w, stride, pad):
    """Textbook NHWC convolution in float64, loop over the kernel."""
    n, h, wd, c = x.shape
    o, kh, kw, _ = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, oh, ow, o))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :]
            out += np.einsum("nhwc,oc->nhwo", patch, w[:, i, j, :].astype(np.float64))
    return out


def s8(rng, shape):
    return rng.integers(-127, 128, shape, dtype=np.int8)


@pytest.mark.parametrize(
    "n,h,c,o,k,stride,pad", [(2, 7, 3, 5, 3, 1, 1), (1, 9, 4, 2, 5, 2, 2), (3, 6, 1, 4, 2, 2, 0), (1, 1, 1, 1, 1, 1, 0)]
)
def test_conv_forward_and_backward_match_float64(n, h, c, o, k, stride, pad):
    rng = np.random.default_rng(n * 100 + h)
    x, w = s8(rng, (n, h, h, c)), s8(rng, (o, k, k, c))
    y = ref.conv2d_s8(x, w, stride, pad)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, direct_conv(x, w, stride, pad))
    err = s8(rng, y.shape)
    # backward data: the adjoint of the forward map, <conv(x), err> == <x, conv_T(err)>
    dx = ref.conv2d_bwd_data_s8(err, w, stride, pad, (h, h))
    assert dx.shape == x.shape
    x64 = x.astype(np.float64)
    for _probe in range(3):
        basis = np.zeros_like(x)
        idx = tuple(rng.integers(0, s) for s in x.shape)
        basis[idx] = 1
        assert dx[idx] == np.sum(direct_conv(basis, w, stride, pad) * err)
    # weight gradient: d<conv(x, w), err>/dw = sum over positions of x patch * err
    dw = ref.conv2d_bwd_weight_s8(err, x, stride, pad, (k, k))
    for _probe in range(3):
        basis = np.zeros_like(w)
        idx = tuple(rng.integers(0, s) for s in w.shape)
        basis[idx] = 1
        assert dw[idx] == np.sum(direct_conv(x64, basis, stride, pad) * err)


def test_gemm_matches_float64_and_widens_when_it_must():
    rng = np.random.default_rng(0)
    a, b = s8(rng, (5, 33)), s8(rng, (7, 33))
    np.testing.assert_array_equal(ref.gemm_s8(a, b), a.astype(np.int64) @ b.astype(np.int64).T)
    long_k = 140_000  # 140000 * 127 * 127 > 2**31: int64 accumulators
    a, b = np.full((1, long_k), 127, np.int8), np.full((1, long_k), 127, np.int8)
    out = ref.gemm_s8(a, b)
    assert out.dtype == np.int64 and out[0, 0] == long_k * 127 * 127


def test_forward_requantization_tracks_dequantized_float():
    """y = RoundShift(x*w) with e_out = e_x + e_w + s equals the float product within one LSB."""
    rng = np.random.default_rng(1)
    x, w = s8(rng, (4, 64)), s8(rng, (10, 64))
    acc = ref.gemm_s8(x, w)
    q, s = ref.requantize(acc, "round", None)
    exact = (x.astype(np.float64) * 2.0**-7) @ (w.astype(np.float64) * 2.0**-9).T
    approx = q.astype(np.float64) * 2.0 ** (-7 - 9 + s)
    assert s > 0 and np.abs(approx - exact).max() <= 2.0 ** (-16 + s) / 2 + 1e-12


def test_maxpool_forward_backward():
    x = np.array([[1, 5, 2, 2], [3, 5, -1, 0], [0, 0, 7, 7], [0, -3, 7, 1]], np.int8).reshape(1, 4, 4, 1)
    y, argmax = ref.maxpool_s8(x, 2, 2)
    np.testing.assert_array_equal(y[0, :, :, 0], [[5, 2], [0, 7]])
    np.testing.assert_array_equal(argmax[0, :, :, 0], [[1, 0], [0, 0]])  # first maximum wins
    err = np.array([[10, 20], [30, 40]], np.int8).reshape(1, 2, 2, 1)
    dx = ref.maxpool_bwd_s8(err, argmax, 2, 2, (4, 4))
    expected = np.zeros((4, 4), np.int8)
    expected[0, 1], expected[0, 2], expected[2, 0], expected[2, 2] = 10, 20, 30, 40
    np.testing.assert_array_equal(dx[0, :, :, 0], expected)


def test_overlapping_pool_gradients_add_then_clip():
    x = np.zeros((1, 3, 3, 1), np.int8)
    x[0, 1, 1, 0] = 9  # the max of all four 2x2 windows with stride 1
    y, argmax = ref.maxpool_s8(x, 2, 1)
    err = np.full((1, 2, 2, 1), 100, np.int8)
    assert ref.maxpool_bwd_s8(err, argmax, 2, 1, (3, 3))[0, 1, 1, 0] == 127


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("exponent", [-3, -5, -9])
def test_niti_loss_gradient_tracks_float_softmax(exponent):
    rng = np.random.default_rng(exponent + 20)
    logits = rng.integers(-127, 128, (256, 10)).astype(np.int8)
    labels = rng.integers(0, 10, 256)
    err = ref.niti_loss_grad_s8(logits, exponent, labels, RngKey(0, 0, 0))
    assert err.dtype == np.int8
    target = softmax(logits * 2.0**exponent)
    target[np.arange(256), labels] -= 1
    got = err * 2.0**LOSS_EXPONENT
    # base-2 softmax with a 10-bit window and 2**-7 resolution: close, not equal
    assert np.corrcoef(got.ravel(), target.ravel())[0, 1] > 0.97
    assert np.abs(got - target).mean() < 0.05
    assert (np.sign(got[np.arange(256), labels]) <= 0).all()  # the true class is pushed up


def test_niti_update_shifts_gradient_to_mu_bits():
    w = np.zeros((4, 4), np.int8)
    grad = np.arange(-8000, 8000, 1000, dtype=np.int32).reshape(4, 4)  # max |g| 8000: 13 bits
    new = ref.niti_update_s8(w, grad, 3, "round", None)
    np.testing.assert_array_equal(new, -numerics.shift_round(grad, 13 - 3, "round"))
    assert np.abs(new).max() <= 2**3
    np.testing.assert_array_equal(ref.niti_update_s8(w, np.zeros_like(grad), 3, "round", None), w)
