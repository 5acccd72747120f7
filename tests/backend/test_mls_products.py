"""MLS's exact int16 products (matmul_s16) on every x86 path of the CPU backend (AVX-512
VNNI vpdpwssd, AVX2 pmaddwd, scalar) against ops_ref, on random and ragged shapes (K odd
and not a multiple of the 16-channel group, M and N not multiples of the row and panel
steps), the same at 1 and 2 threads; the fused conv backward data (conv2d_bwd_data_s16)
likewise; and the forward's im2col patches reused by the
weight gradient (algorithms/_emulated.PatchCache) only when they are exactly im2col's.
"""
from __future__ import annotations

import numpy as np
import pytest

from dsptrain import _cpu_ops as native
from dsptrain.algorithms._emulated import PatchCache
from dsptrain.backends.ops_cpu import ISA_ENV, CpuBackend

ISAS = ("avx512vnni", "avx2", "scalar")
# (m, k, n): LeNet's conv1/conv2/fc shapes with MLS's groups, and ragged ones around the
# AVX-512 step (8 rows, 16-column panels) and the 16-element groups along K
SHAPES = [(1, 1, 1), (9, 25, 6), (17, 150, 16), (8, 31, 17), (64, 400, 120), (6, 3001, 25), (23, 47, 33)]


@pytest.fixture(params=ISAS)
def isa_backend(request, monkeypatch):
    isa = request.param
    if isa not in native.supported_isas():
        pytest.skip(f"this CPU/build has no {isa} (has {', '.join(native.supported_isas())})")
    monkeypatch.setenv(ISA_ENV, isa)
    backend = CpuBackend()
    assert native.isa() == isa
    yield backend
    monkeypatch.delenv(ISA_ENV)
    CpuBackend()   # back to the best path for the other tests


def mls_elements(rng, shape, kmax=3):
    """int8 elements with their group shift applied, as quantize_mls stores them."""
    return (rng.integers(-127, 128, shape) << rng.integers(0, kmax + 1, shape)).astype(np.int16)


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("a_transposed", [False, True])
def test_matmul_s16_every_isa(isa_backend, ref, m, k, n, a_transposed):
    rng = np.random.default_rng(7 * m + 3 * k + n)
    a = mls_elements(rng, (m, k))
    b = mls_elements(rng, (k, n))
    a = np.ascontiguousarray(a.T) if a_transposed else a
    np.testing.assert_array_equal(isa_backend.matmul_s16(a, b, a_transposed), ref.matmul_s16(a, b, a_transposed))


def test_matmul_s16_int32_flushes_every_isa(isa_backend, ref):
    """Sums far past int32: the int32 lanes must be flushed to int64 in time on each path."""
    a = np.full((9, 4001), -16256, np.int16)
    b = np.full((4001, 17), 16256, np.int16)
    np.testing.assert_array_equal(isa_backend.matmul_s16(a, b), ref.matmul_s16(a, b))
    full = np.full((3, 5), -32768, np.int16)   # 2 * 2**30 per pair: no int32 block fits
    np.testing.assert_array_equal(isa_backend.matmul_s16(full, full.T.copy()), ref.matmul_s16(full, full.T.copy()))


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
# product's K), a 1-channel one with a 3x3 kernel
CONV_SHAPES = [(3, 14, 14, 6, 16, 5, 1, 0), (2, 9, 7, 5, 3, 3, 2, 1), (5, 6, 6, 1, 6, 3, 1, 1)]


@pytest.mark.parametrize("n,h,w,c,o,k,stride,pad", CONV_SHAPES)
def test_conv2d_bwd_data_s16_every_isa(isa_backend, ref, n, h, w, c, o, k, stride, pad):
    """The fused backward data (one image's product, then its scatter) against ops_ref's
    matmul_s16 + col2im."""
    rng = np.random.default_rng(n + h + c + o)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    err, wq = mls_elements(rng, (n, oh, ow, o)), mls_elements(rng, (o, k, k, c))
    got = isa_backend.conv2d_bwd_data_s16(err, wq, stride, pad, (h, w))
    assert got.dtype == np.int64 and got.shape == (n, h, w, c)
    np.testing.assert_array_equal(got, ref.conv2d_bwd_data_s16(err, wq, stride, pad, (h, w)))
    big = np.full((n, oh, ow, o), -32768, np.int16)   # no int32 block fits: the int64 path
    np.testing.assert_array_equal(isa_backend.conv2d_bwd_data_s16(big, wq, stride, pad, (h, w)),
                                  ref.conv2d_bwd_data_s16(big, wq, stride, pad, (h, w)))


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


def test_patch_cache_reuses_only_the_same_unchanged_input():
    be = CpuBackend()
    rng = np.random.default_rng(3)
    x = mls_elements(rng, (4, 9, 9, 6))
    cache = PatchCache()
    built = cache.patches(be, x, 3, 3, 1, 1, keep=True)
    again = cache.patches(be, x, 3, 3, 1, 1, keep=False)
    assert again is built                                         # the forward's patches, reused
    np.testing.assert_array_equal(again, be.im2col(x, 3, 3, 1, 1))
    cache.patches(be, x, 3, 3, 1, 1, keep=True)
    x[0, 0, 0, 0] += 1                                            # changed in place: must not reuse
    np.testing.assert_array_equal(cache.patches(be, x, 3, 3, 1, 1, keep=False), be.im2col(x, 3, 3, 1, 1))
    for i in range(10):                                           # forwards without backwards stay bounded
        cache.patches(be, mls_elements(rng, (2, 5, 5, 1)), 3, 3, 1, 0, keep=True)
    assert len(cache._kept) <= cache.entries
    small = PatchCache(max_bytes=3 * 25 * 9 * 2)                  # three 5x5x1 inputs' 3x3 patches
    for i in range(5):
        small.patches(be, mls_elements(rng, (1, 5, 5, 1)), 3, 3, 1, 1, keep=True)
    assert small._bytes() <= small.max_bytes and len(small._kept) == 3
