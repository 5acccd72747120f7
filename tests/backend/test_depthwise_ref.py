"""The judge of the depthwise convolutions (ops_ref's dwconv2d_* hooks) against a plain loop
written from the definition, and against PyTorch's F.conv2d(groups=C) and its gradients.

int8: exact, so the loop and PyTorch in float64 (exact for these magnitudes) agree bit for bit.
float32: the loop sums in the order ops_ref states (each product rounded, then added: taps in
(kh, kw) order; the weight gradient per image over (oh, ow), then the images in order), so it
gives ops_ref's bits; PyTorch sums in its own order, so it agrees within float32 rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

# (n, h, w, c, k, stride, pad): kernel 3 and 5, stride 1 and 2, pad 0/1/2, odd and single
# channel counts, non-square and ragged images, a window wider than the padded image's rest
SHAPES = [
    (2, 7, 7, 3, 3, 1, 1),
    (1, 8, 6, 5, 3, 2, 1),
    (3, 9, 9, 1, 5, 1, 2),
    (2, 11, 7, 7, 5, 2, 2),
    (1, 6, 6, 2, 3, 2, 0),
    (2, 5, 9, 3, 5, 1, 0),
    (1, 10, 10, 4, 3, 2, 2),
    (2, 4, 4, 3, 2, 1, 1),
    (1, 5, 7, 2, 1, 2, 0),
]


def _out(size, k, stride, pad):
    return (size + 2 * pad - k) // stride + 1


def loop_forward(x, w, stride, pad, dtype):
    n, h, wd, c = x.shape
    k = w.shape[1]
    oh, ow = _out(h, k, stride, pad), _out(wd, k, stride, pad)
    y = np.zeros((n, oh, ow, c), dtype)
    for b in range(n):
        for p in range(oh):
            for q in range(ow):
                for ch in range(c):
                    acc = dtype(0)
                    for i in range(k):
                        for j in range(k):
                            r, s = p * stride + i - pad, q * stride + j - pad
                            if 0 <= r < h and 0 <= s < wd:
                                acc = dtype(acc + dtype(dtype(x[b, r, s, ch]) * dtype(w[ch, i, j, 0])))
                            else:
                                acc = dtype(acc + dtype(0))
                    y[b, p, q, ch] = acc
    return y


def loop_backward_data(err, w, stride, pad, in_hw, dtype):
    n, oh, ow, c = err.shape
    k = w.shape[1]
    h, wd = in_hw
    dx = np.zeros((n, h, wd, c), dtype)
    for b in range(n):
        for r in range(h):
            for s in range(wd):
                for ch in range(c):
                    acc = dtype(0)
                    for i in range(k):  # the taps that reach (r, s), in (kh, kw) order
                        for j in range(k):
                            p, rem_p = divmod(r + pad - i, stride)
                            q, rem_q = divmod(s + pad - j, stride)
                            if rem_p == 0 and rem_q == 0 and 0 <= p < oh and 0 <= q < ow:
                                acc = dtype(acc + dtype(dtype(err[b, p, q, ch]) * dtype(w[ch, i, j, 0])))
                    dx[b, r, s, ch] = acc
    return dx


def loop_backward_weight(err, x, stride, pad, k, dtype):
    n, oh, ow, c = err.shape
    h, wd = x.shape[1:3]
    dw = np.zeros((c, k, k, 1), dtype)
    for ch in range(c):
        for i in range(k):
            for j in range(k):
                total = dtype(0)
                for b in range(n):
                    acc = dtype(0)
                    for p in range(oh):
                        for q in range(ow):
                            r, s = p * stride + i - pad, q * stride + j - pad
                            v = dtype(x[b, r, s, ch]) if 0 <= r < h and 0 <= s < wd else dtype(0)
                            acc = dtype(acc + dtype(dtype(err[b, p, q, ch]) * v))
                    total = dtype(total + acc)
                dw[ch, i, j, 0] = total
    return dw


def _int8(rng, shape):
    return rng.integers(-127, 128, shape, dtype=np.int8)


@pytest.mark.parametrize("n, h, w, c, k, stride, pad", SHAPES)
def test_int8_judge_is_the_plain_loop(ref, n, h, w, c, k, stride, pad):
    rng = np.random.default_rng(n * 1000 + h * 100 + c * 10 + k + stride)
    x, wt = _int8(rng, (n, h, w, c)), _int8(rng, (c, k, k, 1))
    y = ref.dwconv2d_s8(x, wt, stride, pad)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, loop_forward(x, wt, stride, pad, np.int64))
    err = _int8(rng, y.shape)
    dx = ref.dwconv2d_bwd_data_s8(err, wt, stride, pad, (h, w))
    assert dx.dtype == np.int32 and dx.shape == x.shape
    np.testing.assert_array_equal(dx, loop_backward_data(err, wt, stride, pad, (h, w), np.int64))
    dw = ref.dwconv2d_bwd_weight_s8(err, x, stride, pad, (k, k))
    assert dw.dtype == np.int32 and dw.shape == wt.shape
    np.testing.assert_array_equal(dw, loop_backward_weight(err, x, stride, pad, k, np.int64))


@pytest.mark.parametrize("n, h, w, c, k, stride, pad", SHAPES)
def test_float_judge_is_the_plain_loop_in_its_order(ref, n, h, w, c, k, stride, pad):
    rng = np.random.default_rng(n * 999 + h * 77 + c * 5 + k + stride)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wt = rng.standard_normal((c, k, k, 1)).astype(np.float32)
    y = ref.dwconv2d_f32(x, wt, stride, pad)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, loop_forward(x, wt, stride, pad, np.float32))
    err = rng.standard_normal(y.shape).astype(np.float32)
    dx = ref.dwconv2d_bwd_data_f32(err, wt, stride, pad, (h, w))
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, loop_backward_data(err, wt, stride, pad, (h, w), np.float32))
    dw = ref.dwconv2d_bwd_weight_f32(err, x, stride, pad, (k, k))
    assert dw.dtype == np.float32
    np.testing.assert_array_equal(dw, loop_backward_weight(err, x, stride, pad, k, np.float32))


def _torch_passes(x, w, err, stride, pad, dtype):
    """PyTorch's depthwise conv (groups = C) and its two gradients, NHWC in and out."""
    torch = pytest.importorskip("torch")
    xt = torch.tensor(np.moveaxis(x, 3, 1).astype(dtype), requires_grad=True)
    wt = torch.tensor(np.moveaxis(w, 3, 1).astype(dtype), requires_grad=True)  # (C, 1, KH, KW)
    y = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad, groups=x.shape[3])
    y.backward(torch.tensor(np.moveaxis(err, 3, 1).astype(dtype)))
    return (
        np.moveaxis(y.detach().numpy(), 1, 3),
        np.moveaxis(xt.grad.numpy(), 1, 3),
        np.moveaxis(wt.grad.numpy(), 1, 3),
    )


@pytest.mark.parametrize("n, h, w, c, k, stride, pad", SHAPES + [(8, 16, 16, 33, 3, 1, 1), (4, 15, 15, 17, 5, 2, 2)])
def test_judge_matches_pytorch(ref, n, h, w, c, k, stride, pad):
    rng = np.random.default_rng(n * 31 + h * 7 + c + k * 3 + stride)
    x, wt = _int8(rng, (n, h, w, c)), _int8(rng, (c, k, k, 1))
    err = _int8(rng, (n, _out(h, k, stride, pad), _out(w, k, stride, pad), c))
    y, dx, dw = _torch_passes(x, wt, err, stride, pad, np.float64)  # exact: sums below 2**53
    np.testing.assert_array_equal(ref.dwconv2d_s8(x, wt, stride, pad), y.astype(np.int64))
    np.testing.assert_array_equal(ref.dwconv2d_bwd_data_s8(err, wt, stride, pad, (h, w)), dx.astype(np.int64))
    np.testing.assert_array_equal(ref.dwconv2d_bwd_weight_s8(err, x, stride, pad, (k, k)), dw.astype(np.int64))

    xf, wf = rng.standard_normal(x.shape).astype(np.float32), rng.standard_normal(wt.shape).astype(np.float32)
    ef = rng.standard_normal(err.shape).astype(np.float32)
    want = _torch_passes(xf, wf, ef, stride, pad, np.float64)
    bound = _torch_passes(abs(xf), abs(wf), abs(ef), stride, pad, np.float64)  # sum of |terms|
    got = (
        ref.dwconv2d_f32(xf, wf, stride, pad),
        ref.dwconv2d_bwd_data_f32(ef, wf, stride, pad, (h, w)),
        ref.dwconv2d_bwd_weight_f32(ef, xf, stride, pad, (k, k)),
    )
    for what, g, exact, b in zip(("forward", "backward data", "weight gradient"), got, want, bound):
        terms = n * g.shape[1] * g.shape[2] if what == "weight gradient" else k * k
        assert np.all(np.abs(g - exact) <= terms * 2.0**-24 * b), what


def test_int8_weight_gradient_widens_when_the_sum_could_overflow(ref):
    """N*OH*OW*127*127 >= 2**31: the sums come back int64, and exact."""
    n, h, c = 9, 128, 2  # 9 * 128 * 128 = 147456 positions
    x = np.full((n, h, h, c), -127, np.int8)
    err = np.full((n, h, h, c), -127, np.int8)
    dw = ref.dwconv2d_bwd_weight_s8(err, x, 1, 1, (3, 3))
    assert dw.dtype == np.int64
    assert dw[0, 1, 1, 0] == n * h * h * 127 * 127 > 2**31


def test_requant_variants_compose_product_and_requantize(ref):
    rng = np.random.default_rng(3)
    x, wt = _int8(rng, (2, 9, 9, 5)), _int8(rng, (5, 3, 3, 1))
    for shift in (None, 0, 9):
        q, used = ref.dwconv2d_requant_s8(x, wt, 2, 1, "round", None, shift)
        want, want_shift = ref.requantize(ref.dwconv2d_s8(x, wt, 2, 1), "round", None, shift)
        np.testing.assert_array_equal(q, want)
        assert used == want_shift
    err = _int8(rng, (2, 5, 5, 5))
    q, used = ref.dwconv2d_bwd_data_requant_s8(err, wt, 2, 1, (9, 9), "round", None)
    want, want_shift = ref.requantize(ref.dwconv2d_bwd_data_s8(err, wt, 2, 1, (9, 9)), "round", None)
    np.testing.assert_array_equal(q, want)
    assert used == want_shift > 0


def test_weight_shape_must_match_channels(ref):
    with pytest.raises(ValueError, match="depthwise weight shape"):
        ref.dwconv2d_s8(np.zeros((1, 4, 4, 3), np.int8), np.zeros((4, 3, 3, 1), np.int8), 1, 1)
