"""MLS's exact int16 products (matmul_s16) on every x86 path of the CPU backend (AVX-512
VNNI vpdpwssd, AVX2 pmaddwd, scalar) against ops_ref, on random and ragged shapes (K odd
and not a multiple of the 16-channel group, M and N not multiples of the row and panel
steps), the same at 1 and 2 threads; and the convolutions built on it (conv2d_s16,
conv2d_bwd_data_s16, conv2d_bwd_weight_s16: patches per image, in cache) likewise.
"""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain import _cpu_ops as native

# (m, k, n): LeNet's conv1/conv2/fc shapes with MLS's groups, and ragged ones around the
# AVX-512 step (8 rows, 16-column panels) and the 16-element groups along K
SHAPES = [(1, 1, 1), (9, 25, 6), (17, 150, 16), (8, 31, 17), (64, 400, 120), (6, 3001, 25), (23, 47, 33)]


def mls_elements(rng, shape, kmax=3):
    """int8 elements with their group shift applied, as quantize_mls stores them."""
    return (rng.integers(-127, 128, shape) << rng.integers(0, kmax + 1, shape)).astype(np.int16)


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("a_transposed", [False, True])
def test_matmul_s16_every_isa(cpu_isa, ref, m, k, n, a_transposed):
    rng = np.random.default_rng(7 * m + 3 * k + n)
    a = mls_elements(rng, (m, k))
    b = mls_elements(rng, (k, n))
    a = np.ascontiguousarray(a.T) if a_transposed else a
    np.testing.assert_array_equal(cpu_isa.matmul_s16(a, b, a_transposed), ref.matmul_s16(a, b, a_transposed))


def test_matmul_s16_int32_flushes_every_isa(cpu_isa, ref):
    """Sums far past int32: the int32 lanes must be flushed to int64 in time on each path."""
    a = np.full((9, 4001), -16256, np.int16)
    b = np.full((4001, 17), 16256, np.int16)
    np.testing.assert_array_equal(cpu_isa.matmul_s16(a, b), ref.matmul_s16(a, b))
    full = np.full((3, 5), -32768, np.int16)  # 2 * 2**30 per pair: no int32 block fits
    np.testing.assert_array_equal(cpu_isa.matmul_s16(full, full.T.copy()), ref.matmul_s16(full, full.T.copy()))


def test_matmul_s16_same_at_one_and_two_threads():
    rng = np.random.default_rng(5)
    a, b = mls_elements(rng, (50176 // 16, 25)), mls_elements(rng, (25, 6))
    e, cols = mls_elements(rng, (4000, 6)), mls_elements(rng, (4000, 150))
    threads, threshold = native.threads(), native.serial_below_macs()
    try:
        native.set_threads(1)
        one = (native.matmul_s16(a, b, False), native.matmul_s16(e, cols, True))
        native.set_threads(2)
        native.set_serial_below_macs(0.0)
        two = (native.matmul_s16(a, b, False), native.matmul_s16(e, cols, True))
    finally:
        native.set_threads(threads)
        native.set_serial_below_macs(threshold)
    for p, q in zip(one, two):
        np.testing.assert_array_equal(p, q)


# (n, h, w, c, o, k, stride, pad): LeNet's conv2, a padded strided one with odd O (the
# product's K), a 1-channel one with a 3x3 kernel, LeNet's conv1 and a 35-column one (the
# weight gradient from channel planes: 16 or more columns, two vectors a row); then the
# planar kernels' ragged blocks: 9 input channels and 7 (odd) output channels in the backward
# data's pair planes, 9 output channels of a 5-wide kernel (blocks of 4, 4, 1 in the weight
# gradient, 8 and 1 in the forward), 32 and 33 channels of error planes (the vector
# transposition's widest case, and the scalar one past it), and a strided one whose kernel
# rows hold 20 taps (the weight gradient's taps in the lanes; 5 output columns, odd), and 17
# output channels there (error pairs past the vector interleave)
CONV_SHAPES = [
    (3, 14, 14, 6, 16, 5, 1, 0),
    (2, 9, 7, 5, 3, 3, 2, 1),
    (5, 6, 6, 1, 6, 3, 1, 1),
    (2, 28, 28, 1, 6, 5, 1, 2),
    (3, 20, 35, 3, 10, 3, 1, 1),
    (2, 11, 12, 9, 7, 5, 1, 1),
    (2, 18, 20, 2, 9, 5, 1, 2),
    (1, 17, 17, 2, 32, 2, 1, 0),
    (1, 16, 16, 1, 33, 1, 1, 0),
    (2, 13, 11, 4, 5, 5, 2, 1),
    (1, 6, 6, 4, 17, 4, 1, 0),
]


@pytest.mark.parametrize("n,h,w,c,o,k,stride,pad", CONV_SHAPES)
def test_conv2d_bwd_data_s16_every_isa(cpu_isa, ref, n, h, w, c, o, k, stride, pad):
    """The fused backward data (one image's product, then its scatter) against ops_ref's
    matmul_s16 + col2im."""
    rng = np.random.default_rng(n + h + c + o)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    err, wq = mls_elements(rng, (n, oh, ow, o)), mls_elements(rng, (o, k, k, c))
    got = cpu_isa.conv2d_bwd_data_s16(err, wq, stride, pad, (h, w))
    assert got.dtype == np.int64 and got.shape == (n, h, w, c)
    np.testing.assert_array_equal(got, ref.conv2d_bwd_data_s16(err, wq, stride, pad, (h, w)))
    big = np.full((n, oh, ow, o), -32768, np.int16)  # no int32 block fits: the int64 path
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_data_s16(big, wq, stride, pad, (h, w)), ref.conv2d_bwd_data_s16(big, wq, stride, pad, (h, w))
    )


def test_conv2d_bwd_data_s16_same_at_one_and_two_threads_and_checks_shapes():
    rng = np.random.default_rng(11)
    err, wq = mls_elements(rng, (64, 10, 10, 16)), mls_elements(rng, (16, 5, 5, 6))
    threads, threshold = native.threads(), native.serial_below_macs()
    try:
        native.set_threads(1)
        one = native.conv2d_bwd_data_s16(err, wq, 1, 0, (14, 14))
        native.set_threads(2)
        native.set_serial_below_macs(0.0)
        two = native.conv2d_bwd_data_s16(err, wq, 1, 0, (14, 14))
    finally:
        native.set_threads(threads)
        native.set_serial_below_macs(threshold)
    np.testing.assert_array_equal(one, two)
    with pytest.raises(ValueError, match=r"conv2d_bwd_data_s16: err shape \(64, 10, 10, 16\) does not match"):
        native.conv2d_bwd_data_s16(err, wq, 1, 0, (15, 14))


@pytest.mark.parametrize("n,h,w,c,o,k,stride,pad", CONV_SHAPES)
def test_conv2d_s16_and_bwd_weight_every_isa(cpu_isa, ref, n, h, w, c, o, k, stride, pad):
    """The forward and weight gradient with each image's patches built in cache, against
    ops_ref's im2col + matmul_s16; and operands whose sums leave int32 (the int64 path)."""
    rng = np.random.default_rng(n + h + c + o + 1)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    x, wq, err = mls_elements(rng, (n, h, w, c)), mls_elements(rng, (o, k, k, c)), mls_elements(rng, (n, oh, ow, o))
    for xs, es in ((x, err), (np.full_like(x, -32768), np.full_like(err, 32767))):
        got = cpu_isa.conv2d_s16(xs, wq, stride, pad)
        assert got.dtype == np.int64 and got.shape == (n, oh, ow, o)
        np.testing.assert_array_equal(got, ref.conv2d_s16(xs, wq, stride, pad))
        got = cpu_isa.conv2d_bwd_weight_s16(es, xs, stride, pad, (k, k))
        assert got.dtype == np.int64 and got.shape == (o, k, k, c)
        np.testing.assert_array_equal(got, ref.conv2d_bwd_weight_s16(es, xs, stride, pad, (k, k)))


def test_conv2d_s16_passes_same_at_one_and_two_threads_and_check_shapes():
    rng = np.random.default_rng(13)
    x, wq, err = mls_elements(rng, (64, 28, 28, 1)), mls_elements(rng, (6, 5, 5, 1)), mls_elements(rng, (64, 28, 28, 6))
    threads, threshold = native.threads(), native.serial_below_macs()
    runs = []
    try:
        for count in (1, 2):
            native.set_threads(count)
            native.set_serial_below_macs(0.0 if count == 2 else threshold)
            runs.append((native.conv2d_s16(x, wq, 1, 2), native.conv2d_bwd_weight_s16(err, x, 1, 2, (5, 5))))
    finally:
        native.set_threads(threads)
        native.set_serial_below_macs(threshold)
    for one, two in zip(*runs):
        np.testing.assert_array_equal(one, two)
    with pytest.raises(ValueError, match=r"conv2d_s16: weight shape \(6, 5, 5, 1\) does not match input channels 2"):
        native.conv2d_s16(mls_elements(rng, (1, 8, 8, 2)), wq, 1, 0)
    with pytest.raises(ValueError, match=r"conv2d_bwd_weight_s16: err shape \(64, 28, 28, 6\) does not match x"):
        native.conv2d_bwd_weight_s16(err, x, 1, 0, (5, 5))
