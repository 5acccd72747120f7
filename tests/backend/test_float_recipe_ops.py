"""The float-recipe hooks (Octo, WAGEUBN, AFP, MLS, FP8, FP32) of every backend that
claims them, against ops_ref (float_ops.py) on random and ragged shapes.

Quantizers, element-wise ops, pooling, updates and integer/FP16 products must match bit
for bit; sums over many floats (PRC's squared errors, the compensation layer's channel
sums) within 1e-12 relative, the summation order being the backend's.
"""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.backends.ops_ref import FLOAT_RECIPE_HOOKS

from .conftest import available_backends

BACKENDS = [name for name in available_backends() if name != "dsp"]  # the DSP claims none of them
SHAPES = [(1,), (7,), (3, 5), (64, 6, 7, 3), (2, 33, 17), (70001,)]
SUM_RTOL = 1e-12


@pytest.fixture(params=BACKENDS)
def be(request, make_backend):
    backend = make_backend(request.param)
    missing = [h for h in FLOAT_RECIPE_HOOKS if h not in backend.hooks]
    assert not missing, f"{backend.name} lacks {missing}"
    return backend


def floats(rng, shape, dtype=np.float32, scale=3.0):
    """Normal values over many binades, a few exact zeros, halves that test tie rounding."""
    x = rng.normal(scale=scale, size=shape) * np.exp(rng.uniform(-6, 2, size=shape))
    flat = x.reshape(-1)
    flat[::11] = 0.0
    flat[5::13] = np.round(flat[5::13] * 4) / 4 + 0.5
    return x.astype(dtype)


def key(i):
    from dsptrain.numerics import RngKey

    return RngKey(seed=99 + i, step=3 * i, tensor_id=7 + i, offset=5 * i)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_absmax_and_quantize(be, ref, shape, dtype):
    rng = np.random.default_rng(len(shape) * 31 + int(np.prod(shape)) % 97)
    x = floats(rng, shape, dtype)
    assert be.absmax_f(x) == ref.absmax_f(x)
    top = ref.absmax_f(x) or 1.0
    for i, (bits, mode) in enumerate(
        [(8, "round"), (8, "nearest_even"), (8, "sto"), (4, "sto"), (16, "round"), (12, "sto")]
    ):
        step = top / (2 ** (bits - 1) - 1) * (0.6 if i % 2 else 1.0)  # some clip
        got, want = be.quantize_f(x, step, bits, mode, key(i)), ref.quantize_f(x, step, bits, mode, key(i))
        assert got.dtype == want.dtype == (np.int8 if bits <= 8 else np.int16)
        np.testing.assert_array_equal(got, want, err_msg=f"bits {bits} {mode}")


def test_absmax_of_empty_is_zero(be, ref):
    assert be.absmax_f(np.zeros((0, 3), np.float32)) == ref.absmax_f(np.zeros((0, 3), np.float32)) == 0.0


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_dequantize(be, ref, dtype):
    rng = np.random.default_rng(5)
    acc = rng.integers(-(2**30), 2**30, size=(37, 19)).astype(dtype)
    if dtype == np.int64:
        acc *= 2**20
    for scale in (1.0, 3.1e-5, 2.0**-20 / 7):
        np.testing.assert_array_equal(be.dequantize(acc, scale), ref.dequantize(acc, scale))


@pytest.mark.parametrize("shape", [(5,), (64, 10), (3, 70001)])
def test_prc_squared_errors(be, ref, shape):
    x = floats(np.random.default_rng(8), shape)
    top = ref.absmax_f(x)
    ratios = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)
    np.testing.assert_allclose(
        be.prc_squared_errors(x, top, ratios, 127), ref.prc_squared_errors(x, top, ratios, 127), rtol=SUM_RTOL
    )


@pytest.mark.parametrize(
    "shape,group", [((4, 16), 16), ((3, 5, 6), 2), ((64, 7, 7, 1), 1), ((9, 120), 8), ((2, 84), 4)]
)
@pytest.mark.parametrize("mode", ["round", "sto"])
@pytest.mark.parametrize("kmax", [0, 3, 7])
def test_quantize_mls(be, ref, shape, group, mode, kmax):
    x = floats(np.random.default_rng(group * 7 + kmax), shape)
    x.reshape(-1, group)[1::3] *= 1e-3  # quiet groups take larger k
    top = ref.absmax_f(x)
    args = (x, group, top, top / 127, kmax, 127, mode, key(kmax))
    got, want = be.quantize_mls(*args), ref.quantize_mls(*args)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, want)


# groups that are not a power of two and chunks of the native loop (2**15 elements) that
# cut a group in two; and a kmax beyond the eight shifts the AVX-512 loop handles
@pytest.mark.parametrize(
    "shape,group,kmax,qmax", [((5461, 12), 12, 3, 127), ((11000, 6), 3, 2, 127), ((7, 33), 11, 12, 7)]
)
@pytest.mark.parametrize("mode", ["round", "nearest_even", "sto"])
def test_quantize_mls_ragged_groups(be, ref, shape, group, kmax, qmax, mode):
    x = floats(np.random.default_rng(group), shape)
    x.reshape(-1, group)[1::3] *= 1e-3
    top = ref.absmax_f(x)
    args = (x, group, top, top / qmax, kmax, qmax, mode, key(group))
    np.testing.assert_array_equal(be.quantize_mls(*args), ref.quantize_mls(*args))


@pytest.mark.parametrize("fmt", [(5, 2), (5, 10), (4, 3)])
@pytest.mark.parametrize("mode", ["nearest_even", "sto"])
def test_round_float(be, ref, fmt, mode):
    rng = np.random.default_rng(fmt[1])
    x = (rng.normal(size=20011) * np.exp(rng.uniform(-25, 12, 20011))).astype(np.float32)
    x[:5] = [0.0, -0.0, 1e9, -1e9, 2.0**-30]
    for dtype in (np.float32, np.float64):
        np.testing.assert_array_equal(
            be.round_float(x.astype(dtype), *fmt, mode, key(3)), ref.round_float(x.astype(dtype), *fmt, mode, key(3))
        )


GEMM16_SHAPES = [(1, 1, 1), (3, 5, 2), (7, 16, 17), (64, 400, 120), (6, 2001, 25), (33, 17, 1)]


@pytest.mark.parametrize("m,k,n", GEMM16_SHAPES)
@pytest.mark.parametrize("a_transposed", [False, True])
def test_matmul_s16(be, ref, m, k, n, a_transposed):
    rng = np.random.default_rng(m * k + n)
    a = (rng.integers(-127, 128, (m, k)) << rng.integers(0, 4, (m, k))).astype(np.int16)
    b = (rng.integers(-127, 128, (k, n)) << rng.integers(0, 8, (k, n))).astype(np.int16)
    a = np.ascontiguousarray(a.T) if a_transposed else a
    np.testing.assert_array_equal(be.matmul_s16(a, b, a_transposed), ref.matmul_s16(a, b, a_transposed))


def test_matmul_s16_extremes(be, ref):
    """Sums far beyond int32 (int32 lanes flushed in time), and 16-bit errors x int8."""
    a = np.full((5, 3000), -16256, np.int16)
    b = np.full((3000, 3), 16256, np.int16)
    np.testing.assert_array_equal(be.matmul_s16(a, b), ref.matmul_s16(a, b))
    a16 = np.full((7, 5001), -32767, np.int16)
    b8 = np.full((5001, 9), -127, np.int16)
    np.testing.assert_array_equal(be.matmul_s16(a16, b8), ref.matmul_s16(a16, b8))


@pytest.mark.parametrize(
    "m,k,n,chunk",
    [(1, 1, 1, 64), (3, 5, 9, 64), (10, 150, 6, 64), (17, 130, 13, 16), (64, 400, 120, 64), (6, 700, 25, 64)],
)
@pytest.mark.parametrize("fp16_adds", [True, False])
@pytest.mark.parametrize("a_transposed", [False, True])
def test_matmul_fp16_chunked(be, ref, m, k, n, chunk, fp16_adds, a_transposed):
    rng = np.random.default_rng(k)
    a = ref.round_float(rng.normal(size=(k, m) if a_transposed else (m, k)) * 4, 5, 2, "nearest_even", None)
    b = ref.round_float(rng.normal(size=(k, n)), 5, 10, "nearest_even", None)
    np.testing.assert_array_equal(
        be.matmul_fp16_chunked(a, b, a_transposed, chunk, fp16_adds),
        ref.matmul_fp16_chunked(a, b, a_transposed, chunk, fp16_adds),
    )


@pytest.mark.parametrize(
    "n,h,w,c,o,k,stride,pad",
    [
        (1, 3, 3, 1, 1, 3, 1, 0),
        (2, 14, 14, 6, 16, 5, 1, 0),
        (3, 7, 9, 5, 4, 3, 2, 1),
        (2, 28, 28, 1, 6, 5, 1, 2),
        (40, 28, 28, 1, 6, 5, 1, 2),
        (9, 17, 13, 7, 2, 3, 2, 1),
    ],
)
def test_im2col_and_col2im(be, ref, n, h, w, c, o, k, stride, pad):
    # tap rows of 3 to 35 elements (the native im2col copies them 16, 32 or 64 bytes
    # wide, or exactly); 40 images are split over the threads
    rng = np.random.default_rng(h + c)
    for x in (rng.integers(-16256, 16257, (n, h, w, c)).astype(np.int16), floats(rng, (n, h, w, c))):
        got = be.im2col(x, k, k, stride, pad)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, ref.im2col(x, k, k, stride, pad))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    ints = rng.integers(-(2**40), 2**40, (n * oh * ow, k * k * c))
    halves = ref.round_float(rng.normal(size=ints.shape) * 100, 5, 10, "nearest_even", None).astype(np.float64)
    for dcols in (ints, halves):
        got = be.col2im(dcols, (n, oh, ow), (k, k, c), stride, pad, (h, w))
        assert got.dtype == dcols.dtype and got.shape == (n, h, w, c)
        np.testing.assert_array_equal(got, ref.col2im(dcols, (n, oh, ow), (k, k, c), stride, pad, (h, w)))


@pytest.mark.parametrize("shape", SHAPES)
def test_relu(be, ref, shape):
    rng = np.random.default_rng(2)
    x, err = floats(rng, shape), floats(rng, shape)
    x.reshape(-1)[::5] = -0.0  # kept as -0.0, bit for bit
    np.testing.assert_array_equal(be.relu_f32(x).view(np.uint32), ref.relu_f32(x).view(np.uint32))
    np.testing.assert_array_equal(be.relu_bwd_f32(err, x), ref.relu_bwd_f32(err, x))


@pytest.mark.parametrize(
    "n,h,w,c,k,s",
    [
        (1, 2, 2, 1, 2, 2),
        (3, 7, 9, 5, 2, 2),
        (2, 9, 9, 3, 3, 2),
        (64, 28, 28, 6, 2, 2),
        (2, 6, 6, 3, 2, 3),
        (2, 8, 8, 16, 2, 2),
        (1, 5, 5, 40, 2, 2),
        (2, 6, 5, 4, 3, 1),
    ],
)
def test_maxpool(be, ref, n, h, w, c, k, s):
    rng = np.random.default_rng(h * w)
    x = floats(rng, (n, h, w, c))
    x[0, :k, :k, 0] = 1.5  # ties: the first maximum wins
    y, idx = be.maxpool_f32(x, k, s)
    y_ref, idx_ref = ref.maxpool_f32(x, k, s)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(idx, idx_ref)
    err = floats(rng, y.shape)
    np.testing.assert_array_equal(
        be.maxpool_bwd_f32(err, idx, k, s, (h, w)), ref.maxpool_bwd_f32(err, idx, k, s, (h, w))
    )


@pytest.mark.parametrize("shape", [(1, 1), (64, 10), (64, 28, 28, 6), (3, 5, 7)])
def test_compensation(be, ref, shape):
    rng = np.random.default_rng(shape[-1])
    z, err = floats(rng, shape), floats(rng, shape)
    scale, shift = floats(rng, shape[-1:], scale=0.1), floats(rng, shape[-1:], scale=0.1)
    np.testing.assert_array_equal(be.compensation_fwd(z, scale, shift), ref.compensation_fwd(z, scale, shift))
    got, want = be.compensation_bwd(err, z, scale), ref.compensation_bwd(err, z, scale)
    np.testing.assert_array_equal(got[0], want[0])
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-6)  # float64 sums rounded to float32


@pytest.mark.parametrize("shape", [(1,), (6, 5, 5, 1), (120, 400), (70001,)])
@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd(be, ref, shape, nesterov):
    rng = np.random.default_rng(len(shape))
    w, g, v = floats(rng, shape, scale=0.1), floats(rng, shape, scale=0.01), floats(rng, shape, scale=0.01)
    got, want = be.sgd_f32(w, g, v, 0.05, 0.9, 5e-4, nesterov), ref.sgd_f32(w, g, v, 0.05, 0.9, 5e-4, nesterov)
    for a, b in zip(got, want):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)
