"""What is special to the native CPU backend: each SIMD path against ops_ref, the C++
Threefry against NumPy's and Random123's known answers, and argument checking."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain import numerics

from . import cases
from .conftest import CPU_ISAS

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
from dsptrain.backends.ops_cpu import ISA_ENV, CpuBackend  # noqa: E402


@pytest.mark.parametrize("case", list(cases.gemm_cases()) + list(cases.gemm_extreme_cases())[:16], ids=lambda c: c[0])
def test_gemm_every_isa(cpu_isa, ref, case):
    a, b = case[1]
    np.testing.assert_array_equal(cpu_isa.gemm_s8(a, b), ref.gemm_s8(a, b))


@pytest.mark.parametrize("case", list(cases.conv_cases()), ids=lambda c: c[0])
def test_conv_every_isa(cpu_isa, ref, case):
    c = case[1]
    x, w, err, stride, pad = c["x"], c["w"], c["err"], c["stride"], c["pad"]
    np.testing.assert_array_equal(cpu_isa.conv2d_s8(x, w, stride, pad), ref.conv2d_s8(x, w, stride, pad))
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_data_s8(err, w, stride, pad, x.shape[1:3]),
        ref.conv2d_bwd_data_s8(err, w, stride, pad, x.shape[1:3]),
    )
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
        ref.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
    )


# (N, H, W, C, O, K, stride, pad): few channels (the pixel-panel and panel weight-gradient
# kernels), LeNet's own layers, stride 2, batch 1, padding beyond K-1 (the transposed
# convolution then crops), and wide layers that stay on im2col + GEMM.
SMALL_CONV_SHAPES = [
    (2, 28, 28, 1, 6, 5, 1, 2),
    (3, 14, 14, 6, 16, 5, 1, 0),
    (1, 9, 9, 3, 2, 3, 2, 1),
    (2, 12, 11, 6, 16, 5, 2, 2),
    (1, 5, 5, 4, 3, 5, 1, 4),
    (1, 6, 7, 2, 5, 3, 1, 3),
    (1, 1, 1, 3, 7, 1, 1, 0),
    (2, 8, 8, 3, 64, 3, 1, 1),
    (1, 7, 5, 1, 1, 3, 2, 1),
    (70, 4, 4, 5, 6, 3, 1, 1),
    (2, 6, 6, 96, 128, 3, 1, 1),
]


def small_conv_cases(seed: int = 7):
    rng = np.random.default_rng(seed)
    for n, h, w, c, o, k, stride, pad in SMALL_CONV_SHAPES:
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        yield (
            f"n{n}h{h}w{w}c{c}o{o}k{k}s{stride}p{pad}",
            dict(
                x=cases.int8(rng, (n, h, w, c)),
                w=cases.int8(rng, (o, k, k, c)),
                err=cases.int8(rng, (n, oh, ow, o)),
                stride=stride,
                pad=pad,
            ),
        )


@pytest.mark.parametrize("case", list(small_conv_cases()), ids=lambda c: c[0])
def test_small_channel_conv_every_isa(cpu_isa, ref, case):
    c = case[1]
    x, w, err, stride, pad = c["x"], c["w"], c["err"], c["stride"], c["pad"]
    hw = x.shape[1:3]
    np.testing.assert_array_equal(cpu_isa.conv2d_s8(x, w, stride, pad), ref.conv2d_s8(x, w, stride, pad))
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_data_s8(err, w, stride, pad, hw), ref.conv2d_bwd_data_s8(err, w, stride, pad, hw)
    )
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
        ref.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
    )
    key = cases.rng_key(3)
    for mode in cases.ROUNDING:
        got = cpu_isa.conv2d_requant_s8(x, w, stride, pad, mode, key)
        want = ref.conv2d_requant_s8(x, w, stride, pad, mode, key)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]


# Around the AMX tile step (64 k) and K block (4608): K padded to 64, A read in place,
# a second K block accumulating into C, short K handed to AVX-512 VNNI; M and N off the
# 32 x 32 tile. Every ISA runs them (for the others they are just ragged shapes).
TILE_EDGE_GEMMS = [
    (1, 1, 1),
    (31, 32, 33),
    (33, 33, 31),
    (70, 64, 64),
    (65, 65, 97),
    (40, 4608, 40),
    (33, 4609, 65),
    (64, 9300, 32),
]


@pytest.mark.parametrize("m,k,n", TILE_EDGE_GEMMS, ids=lambda v: str(v))
def test_gemm_tile_edges_every_isa(cpu_isa, ref, m, k, n):
    rng = np.random.default_rng(m * k + n)
    a, b = cases.int8(rng, (m, k)), cases.int8(rng, (n, k))
    np.testing.assert_array_equal(cpu_isa.gemm_s8(a, b), ref.gemm_s8(a, b))
    for va, vb in ((-128, -128), (127, -128)):  # extremes over every K block
        a, b = np.full((m, k), va, np.int8), np.full((n, k), vb, np.int8)
        np.testing.assert_array_equal(cpu_isa.gemm_s8(a, b), ref.gemm_s8(a, b))


# B packed from row-major weights in blocks of whole groups (AVX2: 8 columns x 8 groups,
# one dword transpose; AVX-512: 16 x 16), the rest group by group: K with and without a
# whole block (32 = 8 groups, 36, 260, 320) and off a group (33), N off the 8/16-column
# panel, MobileNetV2's 1x1 shapes (K 16-320, N up to 1280); packed per call and once.
POINTWISE_GEMMS = [(50, 32, 16), (37, 96, 24), (13, 320, 1280), (9, 36, 7), (21, 33, 9), (6, 260, 15), (7, 16, 96)]


@pytest.mark.parametrize("m,k,n", POINTWISE_GEMMS, ids=lambda v: str(v))
def test_gemm_pointwise_packing_every_isa(cpu_isa, ref, m, k, n):
    rng = np.random.default_rng(m + 7 * k + 31 * n)
    a, b = cases.int8(rng, (m, k)), cases.int8(rng, (n, k))
    want = ref.gemm_s8(a, b)
    np.testing.assert_array_equal(cpu_isa.gemm_s8(a, b), want)
    np.testing.assert_array_equal(native.gemm_packed(a, native.pack_weights(b)), want)


# Wide layers on im2col + GEMM: channel counts off every tile and transpose block (16), the
# weight gradient's k-major packing (VNNI: beyond the panel kernel's size limit), the
# transposed convolution's B packed straight from w, depths that are and are not
# multiples of 64 (the patch rows padded for AMX), stride 2.
WIDE_CONV_SHAPES = [
    (2, 4, 4, 130, 264, 3, 1, 1),
    (1, 3, 3, 128, 280, 3, 1, 1),
    (3, 5, 5, 64, 48, 3, 1, 1),
    (2, 7, 6, 40, 33, 3, 2, 1),
    (1, 3, 3, 17, 96, 1, 1, 0),
]


@pytest.mark.parametrize("shape", WIDE_CONV_SHAPES, ids=lambda v: "n{}h{}w{}c{}o{}k{}s{}p{}".format(*v))
def test_wide_conv_every_isa(cpu_isa, ref, shape):
    n, h, w, c, o, k, stride, pad = shape
    rng = np.random.default_rng(sum(shape))
    x, wt = cases.int8(rng, (n, h, w, c)), cases.int8(rng, (o, k, k, c))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    err = cases.int8(rng, (n, oh, ow, o))
    np.testing.assert_array_equal(cpu_isa.conv2d_s8(x, wt, stride, pad), ref.conv2d_s8(x, wt, stride, pad))
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_data_s8(err, wt, stride, pad, (h, w)), ref.conv2d_bwd_data_s8(err, wt, stride, pad, (h, w))
    )
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_weight_s8(err, x, stride, pad, (k, k)), ref.conv2d_bwd_weight_s8(err, x, stride, pad, (k, k))
    )
    key = cases.rng_key(4)  # the fused epilogue: the GEMM's own range estimate, then rounding
    for got, want in (
        (
            cpu_isa.conv2d_requant_s8(x, wt, stride, pad, "sto", key),
            ref.conv2d_requant_s8(x, wt, stride, pad, "sto", key),
        ),
        (
            cpu_isa.conv2d_bwd_data_requant_s8(err, wt, stride, pad, (h, w), "psto", key),
            ref.conv2d_bwd_data_requant_s8(err, wt, stride, pad, (h, w), "psto", key),
        ),
    ):
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]


# Max-pool is one window walk over the element type (cpu_ops/pool.cpp): both types on
# every ISA the CPU has, at one and two threads, on tiling, overlapping and disjoint
# windows, ragged edges, few and many channels (a compile-time channel count or not).
POOL_SHAPES = [
    (1, 2, 2, 1, 2, 2),
    (2, 8, 8, 3, 2, 2),
    (2, 7, 9, 5, 3, 2),
    (1, 6, 6, 4, 3, 1),
    (3, 5, 5, 64, 2, 1),
    (2, 9, 9, 6, 2, 3),
    (2, 7, 8, 16, 3, 3),
    (1, 11, 10, 40, 3, 2),
    (4, 6, 7, 1, 2, 1),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,h,w,c,k,s", POOL_SHAPES, ids=lambda v: str(v))
def test_pool_both_types_every_isa(cpu_isa, ref, threads, n, h, w, c, k, s):
    rng = np.random.default_rng(n * h * w * c + k)
    previous = native.threads()
    native.set_threads(threads)
    try:
        x8 = rng.integers(-3, 4, (n, h, w, c)).astype(np.int8)  # few values: ties, the first maximum wins
        y, idx = cpu_isa.maxpool_s8(x8, k, s)
        want_y, want_idx = ref.maxpool_s8(x8, k, s)
        np.testing.assert_array_equal(y, want_y)
        np.testing.assert_array_equal(idx, want_idx)
        err8 = rng.integers(-128, 128, want_y.shape).astype(np.int8)
        np.testing.assert_array_equal(
            cpu_isa.maxpool_bwd_s8(err8, want_idx, k, s, (h, w)), ref.maxpool_bwd_s8(err8, want_idx, k, s, (h, w))
        )
        xf = rng.standard_normal((n, h, w, c)).astype(np.float32)
        xf[0, :k, :k, 0] = 1.5  # a tie
        y, idx = cpu_isa.maxpool_f32(xf, k, s)
        want_y, want_idx = ref.maxpool_f32(xf, k, s)
        np.testing.assert_array_equal(y.view(np.uint32), want_y.view(np.uint32))
        np.testing.assert_array_equal(idx, want_idx)
        errf = rng.standard_normal(want_y.shape).astype(np.float32) * np.float32(1e4)
        errf.flat[::7] = -0.0  # signed zeros keep their bits, or lose them, as NumPy's
        got = cpu_isa.maxpool_bwd_f32(errf, want_idx, k, s, (h, w))
        want = ref.maxpool_bwd_f32(errf, want_idx, k, s, (h, w))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # the sums' order too
    finally:
        native.set_threads(previous)


def test_short_depth_packs_for_vnni_under_amx():
    """AMX hands K < 33 to AVX-512 VNNI (a 64-k tile step would be mostly padding)."""
    if "amx" not in native.supported_isas():
        pytest.skip("no AMX on this CPU/build")
    native.set_isa("amx")
    try:
        b = np.ones((8, 27), np.int8)
        assert native.pack_weights(b).isa == "avx512vnni"
        assert native.pack_weights(np.ones((8, 64), np.int8)).isa == "amx"
    finally:
        CpuBackend()


def test_conv_algorithm_selection_covers_every_kernel(cpu_isa):
    """The shape-based choice, per ISA: the cases above reach every convolution kernel."""
    seen = set()
    for _, c in list(small_conv_cases()) + list(cases.conv_cases()):
        for pass_ in ("forward", "backward_data", "backward_weight"):
            seen.add(native.conv_algorithm(pass_, c["x"], c["w"], c["stride"], c["pad"]))
    # tap rows of 15 bytes (5 channels): im2col + GEMM on every ISA (3 channels are widened to 4 on AVX-512 VNNI)
    seen.add(native.conv_algorithm("forward", np.zeros((2, 6, 5, 5), np.int8), np.zeros((64, 3, 3, 5), np.int8), 1, 1))
    assert {"pixel_panels", "wgrad_panels", "im2col_gemm", "gemm_1x1"} <= seen, seen
    lenet_conv2 = (np.zeros((64, 14, 14, 6), np.int8), np.zeros((16, 5, 5, 6), np.int8), 1, 0)
    # with the lane kernels (AVX-512 VNNI + VBMI; its forward runs on them too), conv2's 16
    # output channels fill the lanes of its weight gradient (conv_lanes.cpp)
    lanes = native.conv_algorithm("forward", *lenet_conv2) == "lanes"
    assert native.conv_algorithm("backward_weight", *lenet_conv2) == ("wgrad_olanes" if lanes else "wgrad_panels")
    with pytest.raises(ValueError, match="pass 'sideways'"):
        native.conv_algorithm("sideways", *lenet_conv2)


def test_packed_weights_match_gemm(ref):
    rng = np.random.default_rng(0)
    a, b = cases.int8(rng, (70, 300)), cases.int8(rng, (45, 300))
    packed = native.pack_weights(b)
    assert packed.shape == (45, 300) and packed.isa == native.isa()
    np.testing.assert_array_equal(native.gemm_packed(a, packed), ref.gemm_s8(a, b))
    with pytest.raises(ValueError, match="K"):
        native.gemm_packed(a[:, :299].copy(), packed)


def test_forcing_an_unsupported_isa_fails(monkeypatch):
    missing = [isa for isa in CPU_ISAS if isa not in native.supported_isas()]
    if not missing:
        pytest.skip("this CPU supports every ISA")
    monkeypatch.setenv(ISA_ENV, missing[0])
    assert CpuBackend.available()[0] is False
    with pytest.raises(ValueError, match=missing[0]):
        CpuBackend()
    monkeypatch.delenv(ISA_ENV)
    CpuBackend()


def test_unknown_isa_name_fails():
    with pytest.raises(ValueError, match="unknown ISA 'sse9'"):
        native.set_isa("sse9")


# ---------------------------------------------------------------- Threefry
@pytest.mark.parametrize(
    "key, ctr, want",
    [
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ],
)
def test_threefry_known_answers(key, ctr, want):
    """Random123's known-answer vectors for Threefry-2x32-20, in C++ and in NumPy."""
    assert native.threefry2x32(*key, *ctr) == want
    with np.errstate(over="ignore"):
        x0, x1 = numerics.threefry2x32(key, np.uint32(ctr[0]), np.uint32(ctr[1]))
    assert (int(x0), int(x1)) == want


@pytest.mark.parametrize(
    "key",
    [numerics.RngKey(0, 0, 0), numerics.RngKey(7, 3, 11, 5), numerics.RngKey(-1, 2**33 + 5, 2**32 - 1, 2**32 - 3)],
)
def test_random_u32_matches_numpy(key):
    rng = (key.seed & 0xFFFFFFFF, key.step & 0xFFFFFFFF, key.tensor_id & 0xFFFFFFFF, key.offset & 0xFFFFFFFF)
    np.testing.assert_array_equal(native.random_u32(rng, 1000), numerics.random_u32(key, 1000))


# ---------------------------------------------------------------- pooling
# Values from a narrow range so windows hold ties: the first maximum in tap order wins.
# Channel counts hit the compile-time specialisations (1, 3, 6, 16) and the generic path;
# 11 x 9 leaves cells outside every window when stride == kernel.
@pytest.mark.parametrize("c", [1, 2, 3, 6, 16, 37])
@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 2), (3, 3), (2, 1)])
def test_maxpool_and_backward_ties_and_shapes(ref, c, kernel, stride):
    rng = np.random.default_rng(c * 100 + kernel * 10 + stride)
    x = rng.integers(-3, 3, size=(3, 11, 9, c), dtype=np.int8)
    cpu = CpuBackend()
    y, idx = cpu.maxpool_s8(x, kernel, stride)
    y_ref, idx_ref = ref.maxpool_s8(x, kernel, stride)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(idx, idx_ref)
    err = cases.int8(rng, y.shape)
    err.flat[::7] = -128  # the backward clips -128 to -127
    np.testing.assert_array_equal(
        cpu.maxpool_bwd_s8(err, idx, kernel, stride, (11, 9)), ref.maxpool_bwd_s8(err, idx_ref, kernel, stride, (11, 9))
    )


def test_maxpool_large_batch_is_split_over_threads(ref):
    x = cases.int8(np.random.default_rng(3), (64, 28, 28, 6))
    for got, want in zip(CpuBackend().maxpool_s8(x, 2, 2), ref.maxpool_s8(x, 2, 2)):
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- argument checking
@pytest.fixture(scope="module")
def cpu():
    return CpuBackend()


def test_errors_name_the_argument_and_values(cpu):
    a8 = np.zeros((4, 5), np.int8)
    with pytest.raises(ValueError, match=r"gemm_s8: b must be int8, got int16"):
        cpu.gemm_s8(a8, np.zeros((3, 5), np.int16))
    with pytest.raises(ValueError, match=r"a \(4, 5\) and b \(3, 6\) differ in K"):
        cpu.gemm_s8(a8, np.zeros((3, 6), np.int8))
    with pytest.raises(ValueError, match=r"weight shape \(2, 3, 3, 4\) does not match input channels 3"):
        cpu.conv2d_s8(np.zeros((1, 5, 5, 3), np.int8), np.zeros((2, 3, 3, 4), np.int8), 1, 1)
    with pytest.raises(ValueError, match="stride must be positive, got 0"):
        cpu.conv2d_s8(np.zeros((1, 5, 5, 3), np.int8), np.zeros((2, 3, 3, 3), np.int8), 0, 1)
    with pytest.raises(ValueError, match=r"err shape \(1, 4, 4, 2\) does not match in_hw \(5, 5\)"):
        cpu.conv2d_bwd_data_s8(np.zeros((1, 4, 4, 2), np.int8), np.zeros((2, 3, 3, 3), np.int8), 1, 1, (5, 5))
    with pytest.raises(ValueError, match="rounding mode 'up' is not one of"):
        cpu.shift_round(np.zeros(3, np.int32), 2, "up", None)
    with pytest.raises(ValueError, match="needs an RngKey"):
        cpu.shift_round(np.zeros(3, np.int32), 2, "sto", None)
    with pytest.raises(ValueError, match="acc must be int32 or int64, got float32"):
        cpu.absmax(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"label 10 at row 0 is outside \[0, 10\)"):
        cpu.niti_loss_grad_s8(np.zeros((1, 10), np.int8), -3, np.array([10]), numerics.RngKey(0, 0, 0))


def test_non_contiguous_inputs_are_accepted(cpu, ref):
    rng = np.random.default_rng(1)
    a = cases.int8(rng, (40, 60))[:, ::2]
    b = cases.int8(rng, (30, 30)).T
    np.testing.assert_array_equal(cpu.gemm_s8(a, b), ref.gemm_s8(a, b))


def test_available_reports_the_isa():
    ok, why = CpuBackend.available()
    assert ok and native.isa() in why


@pytest.mark.parametrize("mode", cases.ROUNDING)
def test_int32_rounding_every_shift_at_the_extremes(ref, mode):
    """int32 accumulators round in 32-bit lanes (shift <= 31) and 64-bit ones beyond:
    both against ops_ref at every shift, INT32_MIN and INT32_MAX included."""
    backend = CpuBackend()
    rng = np.random.default_rng(5)
    acc = rng.integers(-(2**31), 2**31, 5000, dtype=np.int64).astype(np.int32)
    acc[:8] = [-(2**31), 2**31 - 1, -(2**31) + 1, 0, 1, -1, 2**30, -(2**30)]
    key = cases.rng_key(9)
    for shift in range(0, 34):
        np.testing.assert_array_equal(
            backend.shift_round(acc, shift, mode, key), ref.shift_round(acc, shift, mode, key)
        )
        got, want = backend.requantize(acc, mode, key, shift=shift), ref.requantize(acc, mode, key, shift=shift)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode", cases.ROUNDING)
def test_niti_update_fused_loop_over_chunks(cpu, ref, mode, threads):
    """cpu_ops/update.cpp rounds the step and subtracts it in one loop, chunked over the
    pool: several 4096-element units and a ragged tail, int32 steps of every size (round
    and psto up to shift 30 in AVX-512 lanes where the CPU has them; shift 31 and sto in
    the compiled loop), and int64 gradients whose shift passes 31 (the 64-bit magnitude loop)."""
    rng = np.random.default_rng(threads * 10 + len(mode))
    w = cases.int8(rng, (3 * 4096 + 123,), -127, 127)
    key = cases.rng_key(threads)
    previous = native.threads()
    native.set_threads(threads)
    try:
        full = rng.integers(-(2**31), 2**31, w.shape, dtype=np.int64).astype(np.int32)
        full[:3] = (-(2**31), 2**31 - 1, 0)
        for grad, mu in (
            (full, 2),
            (full, 1),
            (rng.integers(-(2**44), 2**44, w.shape, dtype=np.int64), 4),
            (rng.integers(-200, 201, w.shape, dtype=np.int32), 8),
        ):
            np.testing.assert_array_equal(
                cpu.niti_update_s8(w, grad, mu, mode, key), ref.niti_update_s8(w, grad, mu, mode, key)
            )
    finally:
        native.set_threads(previous)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9999])
@pytest.mark.parametrize("shape", [(1,), (3, 7), (2, 5, 5, 13)])
def test_dropout_mask_native_matches_ref(ref, shape, p):
    """The cpu backend draws dropout's mask itself (native Threefry words), bit for bit ref's:
    the same elements dropped for the same counter, so a run does not depend on the backend."""
    for key in (numerics.RngKey(0, 0, 0), numerics.RngKey(7, 3, 11, 5), numerics.RngKey(-1, 2**33 + 5, 2**32 - 1, 9)):
        mask = CpuBackend().dropout_mask(shape, p, key)
        assert mask.dtype == np.bool_ and mask.shape == shape
        np.testing.assert_array_equal(mask, ref.dropout_mask(shape, p, key))
    assert "dropout_mask" in CpuBackend().hooks  # placement keeps FP32's and NITI's dropout ops on cpu
