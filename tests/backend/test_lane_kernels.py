"""The AVX-512 lane kernels against ops_ref, bit for bit.

- Convolutions (cpu_ops/conv_lanes.cpp: stride 1, few output channels, pixels and channels
  together in the lanes; the weight gradient of one-channel sources, taps in the lanes, and
  of 9-16 output channels, those channels in the lanes; the backward data with a dx row in
  the lanes and the error broadcast):
  ragged widths (partial pixel groups and quads), every lane layout (1 to 3 vectors per
  group, one or two source loads per step), the requantizing entry points (which use the max |acc| the kernel takes; with a given
  shift, round and psto applied in the kernel's registers), at one and two threads; and
  which shapes take them.
- Max-pools whose windows tile the image (cpu_ops/pool_lanes.cpp): ties, -128, 1 to 32
  channels, 2x2 and 3x3 windows.
"""

from __future__ import annotations

import numpy as np
import pytest

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
from dsptrain.backends.ops_cpu import CpuBackend  # noqa: E402


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


HAS_LANES = {"avx512vbmi", "avx512_vnni", "avx512bw"} <= _cpu_flags() and native.isa() in ("avx512vnni", "amx")

# (N, H, W, C, O, K, stride, pad) and the kernels of (forward, backward data, backward
# weight) where the CPU has lanes. O sets the layout (pixels x vectors per group): 6 -> 8 x 3,
# 16 -> 1 x 1, 32 -> 1 x 2, 3 -> 16 x 3, 12 -> 4 x 3, 2 -> 8 x 1, 1 -> 16 x 1; a source of 16 channels
# needs two loads per step (the error pass of LeNet's conv2).
LANE_SHAPES = [
    ((3, 28, 28, 1, 6, 5, 1, 2), ("lanes", "lanes", "wgrad_lanes")),  # LeNet conv1
    ((2, 14, 14, 6, 16, 5, 1, 0), ("lanes", "err_broadcast", "wgrad_olanes")),  # LeNet conv2
    ((2, 9, 13, 1, 3, 3, 1, 1), ("lanes", "lanes", "wgrad_lanes")),
    ((1, 7, 19, 2, 12, 5, 1, 2), ("lanes", "err_broadcast", "wgrad_olanes")),
    ((2, 5, 6, 4, 2, 3, 1, 0), ("lanes", "lanes", "wgrad_panels")),
    ((1, 11, 10, 16, 6, 3, 2, 1), ("pixel_panels", "lanes", "wgrad_panels")),  # stride 2: its error pass is stride 1
    ((2, 8, 9, 3, 8, 1, 1, 0), ("gemm_1x1", "err_broadcast", "wgrad_panels")),
    ((1, 6, 23, 1, 3, 7, 1, 3), ("lanes", "lanes", "wgrad_lanes")),  # 7 wide: 4 vectors of 2 tap rows
    ((2, 10, 10, 1, 8, 3, 1, 1), ("lanes", "err_broadcast", "wgrad_lanes")),  # 3 wide: one vector of 4 tap rows
    ((2, 6, 7, 8, 32, 3, 1, 1), ("lanes", "err_broadcast", "wgrad_panels")),  # 32 channels: one pixel, 2 vectors
    ((1, 5, 9, 32, 48, 3, 1, 1), ("lanes", "lanes", "wgrad_panels")),  # 48: one pixel, 3 vectors
    # 64 fill a GEMM tile; 64-channel source out of reach; the weight gradient's 27 taps as GEMM rows
    ((2, 8, 8, 3, 64, 3, 1, 1), ("implicit_gemm_c4", "pixel_panels", "wgrad_planes")),
    # the weight gradient with 9-16 output channels in the lanes: 27 taps x channels (a
    # block of 24 and 3), 11 columns (a group of 3 pixels), 8 channels (a 104-byte row)
    ((2, 9, 11, 3, 9, 3, 1, 1), ("pixel_panels", "pixel_panels", "wgrad_olanes")),
    ((1, 6, 13, 8, 16, 3, 1, 0), ("lanes", "lanes", "wgrad_olanes")),
]
# On AVX2 (no lanes) each pass takes pixel panels where conv.cpp's use_pixel_panels finds the
# channels fill the AVX2 GEMM tile's short side clearly better than its wide one, else the
# im2col GEMM; the weight gradient takes the panels (fewer than 300K taps x channels).
AVX2_PATHS = {
    (3, 28, 28, 1, 6, 5, 1, 2): ("pixel_panels", "im2col_gemm", "wgrad_panels"),
    (2, 14, 14, 6, 16, 5, 1, 0): ("im2col_gemm", "pixel_panels", "wgrad_panels"),
    (2, 9, 13, 1, 3, 3, 1, 1): ("pixel_panels", "im2col_gemm", "wgrad_panels"),
    (1, 7, 19, 2, 12, 5, 1, 2): ("pixel_panels", "im2col_gemm", "wgrad_panels"),
    (2, 5, 6, 4, 2, 3, 1, 0): ("im2col_gemm", "pixel_panels", "wgrad_panels"),
    (1, 11, 10, 16, 6, 3, 2, 1): ("pixel_panels", "im2col_gemm", "wgrad_panels"),
    (2, 8, 9, 3, 8, 1, 1, 0): ("gemm_1x1", "gemm_1x1", "wgrad_panels"),  # 1x1: the error is A in place
    (1, 6, 23, 1, 3, 7, 1, 3): ("pixel_panels", "im2col_gemm", "wgrad_panels"),
    (2, 10, 10, 1, 8, 3, 1, 1): ("im2col_gemm", "im2col_gemm", "wgrad_panels"),
    (2, 6, 7, 8, 32, 3, 1, 1): ("im2col_gemm", "im2col_gemm", "wgrad_panels"),
    (1, 5, 9, 32, 48, 3, 1, 1): ("im2col_gemm", "im2col_gemm", "wgrad_panels"),
    (2, 8, 8, 3, 64, 3, 1, 1): ("im2col_gemm", "pixel_panels", "wgrad_panels"),
    (2, 9, 11, 3, 9, 3, 1, 1): ("pixel_panels", "pixel_panels", "wgrad_panels"),
    (1, 6, 13, 8, 16, 3, 1, 0): ("im2col_gemm", "im2col_gemm", "wgrad_panels"),
}
WITHOUT_LANES = {
    "lanes": "pixel_panels",
    "wgrad_lanes": "wgrad_panels",
    "wgrad_olanes": "wgrad_panels",
    "err_broadcast": "pixel_panels",
}


def lane_case(shape, seed):
    n, h, w, c, o, k, stride, pad = shape
    rng = np.random.default_rng(seed)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return (cases.int8(rng, (n, h, w, c)), cases.int8(rng, (o, k, k, c)), cases.int8(rng, (n, oh, ow, o)), stride, pad)


@pytest.mark.parametrize("shape,kernels", LANE_SHAPES, ids=lambda v: str(v))
def test_lane_shapes_take_lanes_where_the_cpu_has_them(shape, kernels):
    x, w, _, stride, pad = lane_case(shape, 0)
    got = tuple(native.conv_algorithm(p, x, w, stride, pad) for p in ("forward", "backward_data", "backward_weight"))
    if native.isa() == "avx2":
        assert got == AVX2_PATHS[shape]
        return
    if native.isa() != "avx512vnni":  # 3 channels widened to 4, and the planes, only where the GEMM reads A in place
        kernels = tuple({"implicit_gemm_c4": "im2col_gemm", "wgrad_planes": "wgrad_panels"}.get(k, k) for k in kernels)
    assert got == (kernels if HAS_LANES else tuple(WITHOUT_LANES.get(k, k) for k in kernels))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,kernels", LANE_SHAPES, ids=lambda v: str(v))
def test_lane_convolutions_match_ref(ref, threads, shape, kernels):
    cpu = CpuBackend()
    x, w, err, stride, pad = lane_case(shape, sum(shape))
    hw = x.shape[1:3]
    previous, threshold = native.threads(), native.serial_below_macs()
    native.set_threads(threads)
    native.set_serial_below_macs(0.0)  # two threads split even these small products
    try:
        np.testing.assert_array_equal(cpu.conv2d_s8(x, w, stride, pad), ref.conv2d_s8(x, w, stride, pad))
        np.testing.assert_array_equal(
            cpu.conv2d_bwd_data_s8(err, w, stride, pad, hw), ref.conv2d_bwd_data_s8(err, w, stride, pad, hw)
        )
        np.testing.assert_array_equal(
            cpu.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
            ref.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
        )
        key = cases.rng_key(5)
        for mode in cases.ROUNDING:
            got = cpu.conv2d_requant_s8(x, w, stride, pad, mode, key)
            want = ref.conv2d_requant_s8(x, w, stride, pad, mode, key)
            np.testing.assert_array_equal(got[0], want[0])
            assert got[1] == want[1]
            got = cpu.conv2d_bwd_data_requant_s8(err, w, stride, pad, hw, mode, key)
            want = ref.conv2d_bwd_data_requant_s8(err, w, stride, pad, hw, mode, key)
            np.testing.assert_array_equal(got[0], want[0])
            assert got[1] == want[1]
    finally:
        native.set_threads(previous)
        native.set_serial_below_macs(threshold)


# More lane layouts for the given-shift test: one vector (its error pass: three), two, and
# a one-vector forward whose error pass has 16 pixels a group, wider than its 7 columns.
MORE_LANE_SHAPES = [(2, 11, 9, 6, 16, 3, 1, 1), (1, 13, 11, 4, 32, 3, 1, 1), (1, 11, 7, 3, 2, 5, 1, 2)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [s for s, _ in LANE_SHAPES] + MORE_LANE_SHAPES, ids=str)
def test_lane_convolutions_with_a_given_shift_match_ref(ref, threads, shape):
    """A given shift (adaptive rescaling's steps between checks): the lane kernels round
    to int8 in their registers (round, psto; sto takes the int32 pass). Given the estimate,
    a larger shift, or 0 and a smaller one (they saturate: the estimate is used instead)."""
    cpu = CpuBackend()
    x, w, err, stride, pad = lane_case(shape, 3 * sum(shape))
    err = (err // 4).astype(np.int8)  # smaller errors: a shift of 0 fits some of them
    hw = x.shape[1:3]
    if HAS_LANES and shape in MORE_LANE_SHAPES:
        assert native.conv_algorithm("forward", x, w, stride, pad) == "lanes"
        assert native.conv_algorithm("backward_data", x, w, stride, pad) in ("lanes", "err_broadcast")
    previous, threshold = native.threads(), native.serial_below_macs()
    native.set_threads(threads)
    native.set_serial_below_macs(0.0)
    try:
        key = cases.rng_key(11)
        passes = {
            "forward": (lambda b, **kw: b.conv2d_requant_s8(x, w, stride, pad, **kw)),
            "backward_data": (lambda b, **kw: b.conv2d_bwd_data_requant_s8(err, w, stride, pad, hw, **kw)),
        }
        for name, run in passes.items():
            estimate = run(ref, mode="round", rng=key)[1]
            for given in sorted({0, max(estimate - 1, 0), estimate, estimate + 2}):
                for mode in cases.ROUNDING:
                    got = run(cpu, mode=mode, rng=key, shift=given)
                    want = run(ref, mode=mode, rng=key, shift=given)
                    np.testing.assert_array_equal(got[0], want[0], err_msg=f"{name} {mode} given {given}")
                    assert got[1] == want[1] == max(given, estimate), (name, mode, given)
    finally:
        native.set_threads(previous)
        native.set_serial_below_macs(threshold)


def test_extreme_values_wrap_back_exactly(ref):
    """All -128 inputs against all -128 or 127 weights (and errors): the u8 flip and the
    -128 * sum correction at their largest, and max |acc| at its extreme; LeNet's conv2
    weight gradient and backward data at batch 64 too."""
    cpu = CpuBackend()
    for wv in (-128, 127):
        x = np.full((2, 12, 12, 1), -128, np.int8)
        w = np.full((6, 5, 5, 1), wv, np.int8)
        err = np.full((2, 12, 12, 6), wv, np.int8)
        np.testing.assert_array_equal(cpu.conv2d_s8(x, w, 1, 2), ref.conv2d_s8(x, w, 1, 2))
        np.testing.assert_array_equal(
            cpu.conv2d_bwd_weight_s8(err, x, 1, 2, (5, 5)), ref.conv2d_bwd_weight_s8(err, x, 1, 2, (5, 5))
        )
        got = cpu.conv2d_requant_s8(x, w, 1, 2, "round", cases.rng_key(1))
        want = ref.conv2d_requant_s8(x, w, 1, 2, "round", cases.rng_key(1))
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]
        # the 16-channel weight gradient (output channels in the lanes): 6400 pixels' sums
        x2 = np.full((64, 14, 14, 6), -128, np.int8)
        err2 = np.full((64, 10, 10, 16), wv, np.int8)
        np.testing.assert_array_equal(
            cpu.conv2d_bwd_weight_s8(err2, x2, 1, 0, (5, 5)), ref.conv2d_bwd_weight_s8(err2, x2, 1, 0, (5, 5))
        )
        # the broadcast backward data (the error made u8): every error -128, every weight wv
        w2 = np.full((16, 5, 5, 6), wv, np.int8)
        err3 = np.full((64, 10, 10, 16), -128, np.int8)
        np.testing.assert_array_equal(
            cpu.conv2d_bwd_data_s8(err3, w2, 1, 0, (14, 14)), ref.conv2d_bwd_data_s8(err3, w2, 1, 0, (14, 14))
        )


# Max-pools whose windows tile the image (cpu_ops/pool_lanes.cpp: byte permutes): LeNet's
# two, 3x3 windows (21-byte pieces), 32 channels (one pixel a piece), one channel.
LANE_POOLS = [(3, 28, 28, 6, 2), (2, 10, 10, 16, 2), (2, 12, 9, 5, 3), (1, 8, 16, 32, 2), (2, 6, 10, 1, 2)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,h,w,c,k", LANE_POOLS, ids=lambda v: str(v))
def test_lane_pools_match_ref(ref, threads, n, h, w, c, k):
    cpu = CpuBackend()
    rng = np.random.default_rng(n * h * w * c + k)
    previous = native.threads()
    native.set_threads(threads)
    try:
        x = rng.integers(-3, 4, (n, h, w, c)).astype(np.int8)  # few values: ties, the first maximum wins
        x.flat[::11] = -128
        y, idx = cpu.maxpool_s8(x, k, k)
        want_y, want_idx = ref.maxpool_s8(x, k, k)
        np.testing.assert_array_equal(y, want_y)
        np.testing.assert_array_equal(idx, want_idx)
        err = rng.integers(-128, 128, want_y.shape).astype(np.int8)
        err.flat[::5] = -128  # routed as -127
        np.testing.assert_array_equal(
            cpu.maxpool_bwd_s8(err, want_idx, k, k, (h, w)), ref.maxpool_bwd_s8(err, want_idx, k, k, (h, w))
        )
    finally:
        native.set_threads(previous)
