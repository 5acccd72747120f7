"""The native depthwise convolutions (cpu_ops/dwconv*.cpp) against ops_ref, bit for bit: int8
(plain, requantizing with every rounding mode and a given or estimated shift, and the weight
gradient's int32/int64 sums) and float32 (ops_ref's stated summation order), on every ISA
this CPU has, at 1 and 2 threads, on random and ragged shapes; which loop each shape takes;
the argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
from dsptrain.backends.ops_cpu import ISA_ENV, CpuBackend  # noqa: E402

ISAS = [isa for isa in ("amx", "avx512vnni", "avxvnni", "avx2", "neon", "scalar")]
# (n, h, w, c, k, stride, pad): MobileNetV2-like layers (channels a multiple of 8: the paired
# loop with no tail), ragged channel counts around its 8-channel step (tails only, both, one
# channel), kernel 3 and 5, strides 1 and 2, pads 0-2 and beyond the kernel, odd images,
# strides above the kernel (backward data's phases that no tap reaches: zeros)
SHAPES = [
    (4, 16, 16, 32, 3, 1, 1),
    (3, 16, 16, 96, 3, 2, 1),
    (2, 8, 8, 144, 3, 2, 1),
    (5, 2, 2, 24, 3, 1, 1),
    (2, 7, 9, 3, 3, 1, 1),
    (3, 9, 11, 37, 5, 2, 2),
    (2, 11, 7, 17, 5, 1, 2),
    (1, 6, 6, 1, 3, 2, 0),
    (2, 5, 5, 9, 1, 1, 0),
    (2, 6, 6, 24, 2, 2, 3),
    (1, 13, 12, 40, 5, 2, 0),
    (3, 1, 1, 16, 3, 1, 1),
    (1, 9, 9, 15, 4, 3, 1),
    (2, 7, 7, 16, 1, 2, 0),
    (1, 10, 9, 24, 2, 3, 1),
]


@pytest.fixture(params=ISAS)
def cpu_isa(request, monkeypatch):
    isa = request.param
    if isa not in native.supported_isas():
        pytest.skip(f"this CPU/build has no {isa} (has {', '.join(native.supported_isas())})")
    monkeypatch.setenv(ISA_ENV, isa)
    backend = CpuBackend()
    yield backend
    monkeypatch.delenv(ISA_ENV)
    CpuBackend()


@pytest.fixture(params=[1, 2])
def threads(request):
    previous, threshold = native.threads(), native.serial_below_macs()
    native.set_threads(request.param)
    native.set_serial_below_macs(0.0)  # two threads split even the small shapes
    yield request.param
    native.set_threads(previous)
    native.set_serial_below_macs(threshold)


def operands(shape, seed, dtype=np.int8):
    n, h, w, c, k, stride, pad = shape
    rng = np.random.default_rng(seed)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    if dtype == np.int8:  # the full int8 range, -128 included
        return (
            rng.integers(-128, 128, (n, h, w, c), dtype=np.int8),
            rng.integers(-128, 128, (c, k, k, 1), dtype=np.int8),
            rng.integers(-128, 128, (n, oh, ow, c), dtype=np.int8),
        )
    return tuple(rng.standard_normal(s).astype(np.float32) for s in ((n, h, w, c), (c, k, k, 1), (n, oh, ow, c)))


def equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_int8_passes_every_isa(cpu_isa, threads, ref, shape):
    x, w, err = operands(shape, sum(shape))
    stride, pad, hw, k = shape[5], shape[6], shape[1:3], shape[4]
    equal(cpu_isa.dwconv2d_s8(x, w, stride, pad), ref.dwconv2d_s8(x, w, stride, pad))
    equal(cpu_isa.dwconv2d_bwd_data_s8(err, w, stride, pad, hw), ref.dwconv2d_bwd_data_s8(err, w, stride, pad, hw))
    equal(
        cpu_isa.dwconv2d_bwd_weight_s8(err, x, stride, pad, (k, k)),
        ref.dwconv2d_bwd_weight_s8(err, x, stride, pad, (k, k)),
    )


@pytest.mark.parametrize("shape", SHAPES[:8], ids=str)
def test_requant_variants_every_mode_and_shift(cpu_isa, threads, ref, shape):
    x, w, err = operands(shape, sum(shape) + 1)
    stride, pad, hw = shape[5], shape[6], shape[1:3]
    key = cases.rng_key(sum(shape))
    passes = {
        "forward": lambda b, **kw: b.dwconv2d_requant_s8(x, w, stride, pad, **kw),
        "backward_data": lambda b, **kw: b.dwconv2d_bwd_data_requant_s8(err, w, stride, pad, hw, **kw),
    }
    for name, run in passes.items():
        for mode in cases.ROUNDING:
            # estimated; given and large enough (the fused rounding); given and too small
            for shift in (None, 19, 2):
                got, want = run(cpu_isa, mode=mode, rng=key, shift=shift), run(ref, mode=mode, rng=key, shift=shift)
                equal(got[0], want[0])
                assert got[1] == want[1], (name, mode, shift)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_float_passes_are_ops_ref_bits(cpu_isa, threads, ref, shape):
    x, w, err = operands(shape, sum(shape) + 2, np.float32)
    stride, pad, hw, k = shape[5], shape[6], shape[1:3], shape[4]
    equal(cpu_isa.dwconv2d_f32(x, w, stride, pad), ref.dwconv2d_f32(x, w, stride, pad))
    equal(cpu_isa.dwconv2d_bwd_data_f32(err, w, stride, pad, hw), ref.dwconv2d_bwd_data_f32(err, w, stride, pad, hw))
    equal(
        cpu_isa.dwconv2d_bwd_weight_f32(err, x, stride, pad, (k, k)),
        ref.dwconv2d_bwd_weight_f32(err, x, stride, pad, (k, k)),
    )


def test_weight_gradient_widens_to_int64_exactly(ref):
    """N*OH*OW*127*127 >= 2**31: int64 sums; one image of 366x366 positions of -128 * -128
    passes 2**31 on its own, so its int32 sums must go to the total before they wrap; so do
    many smaller images' sums together."""
    cpu = CpuBackend()
    rng = np.random.default_rng(4)
    x = np.full((1, 366, 366, 8), -128, np.int8)
    x[:, ::7] = rng.integers(-128, 128, x[:, ::7].shape, dtype=np.int8)
    err = np.full((1, 366, 366, 8), -128, np.int8)
    got = cpu.dwconv2d_bwd_weight_s8(err, x, 1, 1, (3, 3))
    assert got.dtype == np.int64
    equal(got, ref.dwconv2d_bwd_weight_s8(err, x, 1, 1, (3, 3)))
    # 14 images of 100x100 positions: the int32 sums run across images and must be flushed
    # between the 13th and the 14th
    x, err = np.full((14, 100, 100, 8), -128, np.int8), np.full((14, 100, 100, 8), -128, np.int8)
    x[:, 3::5] = rng.integers(-128, 128, x[:, 3::5].shape, dtype=np.int8)
    got = cpu.dwconv2d_bwd_weight_s8(err, x, 1, 1, (3, 3))
    assert got.dtype == np.int64
    equal(got, ref.dwconv2d_bwd_weight_s8(err, x, 1, 1, (3, 3)))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_each_shape_takes_its_loop(shape):
    """The paired vpmaddwd loop wherever the CPU has AVX2 and there are 8 channels to pair;
    the portable loop otherwise (fewer channels, or the scalar/NEON paths)."""
    n, h, w, c, k, stride, pad = shape
    sizes = [n, h, w, c, k, k, stride, pad]
    for isa in native.supported_isas():
        previous = native.isa()
        native.set_isa(isa)
        try:
            want = "madd_pairs" if isa in ("amx", "avx512vnni", "avxvnni", "avx2") and c >= 8 else "rows"
            for pass_ in ("forward", "backward_data", "backward_weight"):
                assert native.dwconv_path(pass_, sizes) == want, (isa, pass_)
        finally:
            native.set_isa(previous)


def test_bad_arguments_name_what_and_where():
    x, w = np.zeros((1, 6, 6, 4), np.int8), np.zeros((4, 3, 3, 1), np.int8)
    with pytest.raises(ValueError, match=r"dwconv2d_s8: depthwise weight shape \(5, 3, 3, 1\) does not match 4 input"):
        native.dwconv2d_s8(x, np.zeros((5, 3, 3, 1), np.int8), 1, 1)
    with pytest.raises(ValueError, match="dwconv2d_s8: stride must be positive, got 0"):
        native.dwconv2d_s8(x, w, 0, 1)
    with pytest.raises(ValueError, match="kernel 9x9 does not fit the padded input 8x8"):
        native.dwconv2d_s8(x, np.zeros((4, 9, 9, 1), np.int8), 1, 1)
    with pytest.raises(ValueError, match=r"dwconv2d_bwd_data_s8: err shape \(1, 5, 6, 4\) does not match in_hw"):
        native.dwconv2d_bwd_data_s8(np.zeros((1, 5, 6, 4), np.int8), w, 1, 1, (6, 6))
    with pytest.raises(ValueError, match=r"dwconv2d_bwd_weight_f32: err shape \(1, 6, 6, 3\) does not match x"):
        native.dwconv2d_bwd_weight_f32(np.zeros((1, 6, 6, 3), np.float32), x.astype(np.float32), 1, 1, (3, 3))
    with pytest.raises(ValueError, match="dwconv2d_f32: x must be float32, got int8"):
        native.dwconv2d_f32(x, w.astype(np.float32), 1, 1)


def test_scratch_bytes_are_the_source_buffers_of_every_thread():
    """What the memory planner is told the depthwise kernels keep (cpu_ops/dwconv.h
    dwconv_scratch): each pool thread's source rows, and the requantizing hooks' int32 sums."""
    threads = native.threads()
    n, h, w, c = 4, 16, 12, 32
    fwd = native.dwconv_scratch_bytes("forward", [n, h, w, c, 3, 3, 2, 1], 1, True)
    assert fwd == {"dwconv_source_rows": threads * (h + 2) * (w + 2) * c, "dwconv_requant_acc": n * 8 * 6 * c * 4}
    bwd = native.dwconv_scratch_bytes("backward_data", [n, h, w, c, 5, 5, 1, 2], 4, False)
    assert bwd == {"dwconv_source_rows": threads * (h + 4) * (w + 4) * c * 4}
    wgrad = native.dwconv_scratch_bytes("backward_weight", [n, h, w, c, 3, 3, 1, 1], 1, True)
    assert wgrad == {"dwconv_source_rows": threads * (h + 2) * (w + 2) * c}
