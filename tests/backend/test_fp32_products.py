"""The FP32 recipe's products (gemm_f32, conv2d_f32 and its two backward passes) of every
backend that claims them, against ops_ref on random and ragged shapes.

The native kernels sum in their own order with fused multiply-adds (cpu_ops/gemm_f32.h),
so they match NumPy's BLAS within float32 rounding: each element within
REL_TOL x sum(|a| |b|) of the float64 product, the bound of a float32 sum of that many
terms with room for any order. They must also give the same bits at 1 and 2 threads.
"""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import available_backends

BACKENDS = [name for name in available_backends() if name != "dsp"]
REL_TOL = 1e-5
# (n, h, w, c, o, k, stride, pad): LeNet-5's two layers, a "same" 3x3, strides, 1x1,
# ragged channel counts around the 16-float vector and the kernels' 4/8-row blocks
CONVS = [
    (3, 28, 28, 1, 6, 5, 1, 2),
    (5, 14, 14, 6, 16, 5, 1, 0),
    (2, 9, 7, 5, 33, 3, 2, 1),
    (1, 5, 5, 17, 70, 1, 1, 0),
    (4, 8, 8, 3, 5, 3, 1, 1),
    (3, 11, 6, 20, 9, 3, 1, 1),
    (2, 7, 9, 2, 3, 2, 3, 0),
    (9, 6, 6, 4, 1, 5, 1, 2),
    # small images (ResNet-18's layer3/layer4 on 32x32): dead taps trimmed (1x1 with pad 1:
    # the centre tap alone; 2x2 stride 2: the lower right 2x2), several images per block
    (37, 1, 1, 20, 19, 3, 1, 1),
    (11, 2, 2, 9, 18, 3, 2, 1),
    (40, 2, 2, 7, 12, 3, 1, 1),
    (35, 1, 1, 18, 5, 1, 1, 0),
    (6, 1, 1, 3, 4, 3, 1, 2),
    (19, 3, 2, 5, 6, 3, 2, 1),
    (3, 7, 6, 5, 9, 3, 1, 1),
]
GEMMS = [(64, 120, 400), (5, 3, 7), (1, 70, 1), (33, 17, 129), (9, 65, 16), (130, 6, 25)]


@pytest.fixture(params=BACKENDS)
def be(request, make_backend):
    backend = make_backend(request.param)
    if "conv2d_f32" not in backend.hooks:
        pytest.fail(f"{backend.name} does not claim the FP32 products")
    return backend


def within(got, want, bound, what):
    assert got.dtype == np.float32 and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    excess = np.abs(got.astype(np.float64) - want) - REL_TOL * bound
    assert excess.max(initial=-1) <= 1e-30, f"{what}: off by {np.abs(got - want).max()} beyond the bound"


def f64(x):
    return x.astype(np.float64)


@pytest.mark.parametrize("n, h, w, c, o, k, stride, pad", CONVS)
def test_conv_passes(be, ref, n, h, w, c, o, k, stride, pad):
    rng = np.random.default_rng(n * 1000 + h * 10 + o)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wt = rng.standard_normal((o, k, k, c)).astype(np.float32)
    y = be.conv2d_f32(x, wt, stride, pad)
    within(
        y,
        ref.conv2d_f32(f64(x), f64(wt), stride, pad),
        ref.conv2d_f32(f64(abs(x)), f64(abs(wt)), stride, pad),
        "forward",
    )
    err = rng.standard_normal(y.shape).astype(np.float32)
    dx = be.conv2d_bwd_data_f32(err, wt, stride, pad, (h, w))
    within(
        dx,
        ref.conv2d_bwd_data_f32(f64(err), f64(wt), stride, pad, (h, w)),
        ref.conv2d_bwd_data_f32(f64(abs(err)), f64(abs(wt)), stride, pad, (h, w)),
        "backward data",
    )
    dw = be.conv2d_bwd_weight_f32(err, x, stride, pad, (k, k))
    within(
        dw,
        ref.conv2d_bwd_weight_f32(f64(err), f64(x), stride, pad, (k, k)),
        ref.conv2d_bwd_weight_f32(f64(abs(err)), f64(abs(x)), stride, pad, (k, k)),
        "backward weight",
    )


@pytest.mark.parametrize("m, n, k", GEMMS)
def test_gemm(be, ref, m, n, k):
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    within(be.gemm_f32(a, b), ref.gemm_f32(f64(a), f64(b)), ref.gemm_f32(f64(abs(a)), f64(abs(b))), "a @ b.T")
    b_kn = np.ascontiguousarray(b.T)  # a linear layer's backward data: err @ w, w as stored
    within(
        be.gemm_f32(a, b_kn, False),
        ref.gemm_f32(f64(a), f64(b_kn), False),
        ref.gemm_f32(f64(abs(a)), f64(abs(b_kn)), False),
        "a @ b",
    )


def test_every_float_kernel_of_this_cpu(ref):
    """The native products under each ISA this CPU offers (set_isa lowers the float kernels
    too: AVX-512, AVX2 + FMA, the portable loops), on a small-image shape and a ragged GEMM."""
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((13, 2, 2, 7)).astype(np.float32)
    w = rng.standard_normal((21, 3, 3, 7)).astype(np.float32)
    err = rng.standard_normal((13, 2, 2, 21)).astype(np.float32)
    a, b = rng.standard_normal((29, 40)).astype(np.float32), rng.standard_normal((40, 23)).astype(np.float32)
    previous = native.isa()
    try:
        for isa in native.supported_isas():
            native.set_isa(isa)
            within(
                native.conv2d_f32(x, w, 1, 1),
                ref.conv2d_f32(f64(x), f64(w), 1, 1),
                ref.conv2d_f32(f64(abs(x)), f64(abs(w)), 1, 1),
                f"{isa} forward",
            )
            within(
                native.conv2d_bwd_weight_f32(err, x, 1, 1, (3, 3)),
                ref.conv2d_bwd_weight_f32(f64(err), f64(x), 1, 1, (3, 3)),
                ref.conv2d_bwd_weight_f32(f64(abs(err)), f64(abs(x)), 1, 1, (3, 3)),
                f"{isa} backward weight",
            )
            within(
                native.gemm_f32(a, b, False),
                ref.gemm_f32(f64(a), f64(b), False),
                ref.gemm_f32(f64(abs(a)), f64(abs(b)), False),
                f"{isa} a @ b",
            )
    finally:
        native.set_isa(previous)


def test_native_products_are_the_same_at_one_and_two_threads():
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((17, 14, 14, 6)).astype(np.float32)
    w = rng.standard_normal((16, 5, 5, 6)).astype(np.float32)
    err = rng.standard_normal((17, 10, 10, 16)).astype(np.float32)
    a, b = rng.standard_normal((300, 150)).astype(np.float32), rng.standard_normal((40, 150)).astype(np.float32)

    def run():
        return (
            native.conv2d_f32(x, w, 1, 0),
            native.conv2d_bwd_data_f32(err, w, 1, 0, (14, 14)),
            native.conv2d_bwd_weight_f32(err, x, 1, 0, (5, 5)),
            native.gemm_f32(a, b, True),
        )

    threads, threshold = native.threads(), native.serial_below_macs()
    try:
        native.set_threads(1)
        one = run()
        native.set_threads(2)
        native.set_serial_below_macs(0.0)
        two = run()
    finally:
        native.set_threads(threads)
        native.set_serial_below_macs(threshold)
    for p, q in zip(one, two):
        np.testing.assert_array_equal(p, q)


def test_bad_shapes_name_the_operands():
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    x = np.zeros((1, 8, 8, 3), np.float32)
    with pytest.raises(ValueError, match=r"weight shape \(4, 3, 3, 2\) does not match input channels 3"):
        native.conv2d_f32(x, np.zeros((4, 3, 3, 2), np.float32), 1, 1)
    with pytest.raises(ValueError, match=r"err shape \(1, 5, 5, 4\) does not match"):
        native.conv2d_bwd_weight_f32(np.zeros((1, 5, 5, 4), np.float32), x, 1, 1, (3, 3))
    with pytest.raises(ValueError, match="must be float32"):
        native.conv2d_f32(x.astype(np.float64), np.zeros((4, 3, 3, 3), np.float32), 1, 1)
    with pytest.raises(ValueError, match=r"differ in K"):
        native.gemm_f32(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32), True)
