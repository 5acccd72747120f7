"""Grouped int8 convolutions (groups > 1, dilation 1 or more): each backend's hooks against
ops_ref bit for bit, and ops_ref against the dense conv on a block-diagonal weight.

ops_ref computes them by definition (each group's dilated conv of its own channels); the DSP
runs grouped_hooks.py's compositions (one product per group on its conv kernels, a depthwise
conv on its depthwise kernels, dilated by polyphase decomposition); the CPU the same for a
depthwise conv and its native grouped conv (cpu_ops/conv_grouped.cpp) for every other, checked
below on more ragged shapes, on every ISA this CPU has and 1 and 2 threads, with pins on the
native route and the algorithm each pass takes."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.numerics import RngKey

from .conftest import available_backends

# (n, h, w, c, o, groups, kernel, stride, pad, dilation): ragged sizes, groups 2, 3, 4 and 8,
# channels per group from 1 (depthwise) to 6, strides 1 and 2, kernels 1 and 3, dilations 1 to 3
CASES = [
    (2, 9, 11, 6, 4, 2, 3, 1, 1, 1),
    (1, 10, 7, 9, 6, 3, 3, 2, 2, 2),
    (3, 8, 8, 8, 12, 4, 1, 1, 0, 1),
    (2, 7, 9, 16, 8, 8, 1, 2, 0, 2),
    (1, 11, 13, 12, 12, 4, 3, 2, 1, 1),
    (2, 9, 10, 24, 16, 8, 3, 1, 2, 2),
    (1, 12, 9, 3, 3, 3, 3, 1, 2, 2),  # depthwise, dilated: polyphase on the depthwise hooks
    (2, 13, 11, 8, 8, 8, 3, 2, 2, 2),  # depthwise, stride 2 = dilation: one residue class
    (1, 14, 12, 5, 5, 5, 3, 2, 3, 3),  # depthwise, stride 2, dilation 3: every class, subsampled
    (2, 9, 9, 4, 4, 4, 3, 1, 4, 2),  # depthwise, padding past the dilated reach
    (2, 8, 8, 8, 8, 8, 3, 2, 1, 1),  # depthwise undilated: the depthwise hooks themselves
    (1, 6, 6, 6, 6, 6, 1, 2, 0, 2),  # 1x1 depthwise: the dilation changes nothing
]
IDS = [f"n{c[0]}h{c[1]}w{c[2]}c{c[3]}o{c[4]}g{c[5]}k{c[6]}s{c[7]}p{c[8]}d{c[9]}" for c in CASES]


@pytest.fixture(scope="module", params=available_backends())
def be(request, make_backend):
    backend = make_backend(request.param)
    yield backend
    backend.close()


def _operands(case, seed):
    n, h, w, c, o, g, k, s, p, d = case
    rng = np.random.default_rng(seed)
    x = rng.integers(-127, 128, (n, h, w, c), dtype=np.int8)
    wt = rng.integers(-127, 128, (o, k, k, c // g), dtype=np.int8)
    oh, ow = ((size + 2 * p - (k - 1) * d - 1) // s + 1 for size in (h, w))
    err = rng.integers(-127, 128, (n, oh, ow, o), dtype=np.int8)
    return x, wt, err


def _block_diagonal(wt, groups):
    """The grouped weight as a dense one with zeros between groups: the same conv, groups 1."""
    o, k, _, cg = wt.shape
    dense = np.zeros((o, k, k, cg * groups), np.int8)
    per = o // groups
    for g in range(groups):
        dense[g * per : (g + 1) * per, ..., g * cg : (g + 1) * cg] = wt[g * per : (g + 1) * per]
    return dense


def _equal(got, want):
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_ref_is_the_dense_conv_on_a_block_diagonal_weight(ref, case):
    n, h, w, c, o, g, k, s, p, d = case
    x, wt, err = _operands(case, 1)
    dense = _block_diagonal(wt, g)
    np.testing.assert_array_equal(ref.conv2d_grouped_s8(x, wt, s, p, d, g), ref.conv2d_dilated_s8(x, dense, s, p, d))
    np.testing.assert_array_equal(
        ref.conv2d_grouped_bwd_data_s8(err, wt, s, p, d, g, (h, w)),
        ref.conv2d_dilated_bwd_data_s8(err, dense, s, p, d, (h, w)),
    )
    whole = ref.conv2d_dilated_bwd_weight_s8(err, x, s, p, d, (k, k))
    np.testing.assert_array_equal(
        ref.conv2d_grouped_bwd_weight_s8(err, x, s, p, d, g, (k, k)), _block_diagonal_part(whole, g)
    )


def _block_diagonal_part(whole, groups):
    """The diagonal blocks of a dense gradient [O, KH, KW, C] as the grouped one [O, KH, KW, C/groups]."""
    o, c = whole.shape[0], whole.shape[-1]
    per, cg = o // groups, c // groups
    return np.concatenate([whole[g * per : (g + 1) * per, ..., g * cg : (g + 1) * cg] for g in range(groups)], axis=0)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_products_match_ref(be, ref, case):
    n, h, w, c, o, g, k, s, p, d = case
    x, wt, err = _operands(case, 2)
    _equal(be.conv2d_grouped_s8(x, wt, s, p, d, g), ref.conv2d_grouped_s8(x, wt, s, p, d, g))
    _equal(
        be.conv2d_grouped_bwd_data_s8(err, wt, s, p, d, g, (h, w)),
        ref.conv2d_grouped_bwd_data_s8(err, wt, s, p, d, g, (h, w)),
    )
    _equal(
        be.conv2d_grouped_bwd_weight_s8(err, x, s, p, d, g, (k, k)),
        ref.conv2d_grouped_bwd_weight_s8(err, x, s, p, d, g, (k, k)),
    )


@pytest.mark.parametrize("mode", ["round", "psto", "sto"])
@pytest.mark.parametrize("case", CASES[::2], ids=IDS[::2])
def test_requantized_products_match_ref(be, ref, case, mode):
    """NITI's epilogue over the whole tensor: the same int8 bits and one shift, stochastic
    rounding included, with the shift estimated and given."""
    n, h, w, c, o, g, k, s, p, d = case
    x, wt, err = _operands(case, 3)
    key = RngKey(seed=7, step=3, tensor_id=11)
    for given in (None, 12):
        want = ref.conv2d_grouped_requant_s8(x, wt, s, p, d, g, mode, key, given)
        got = be.conv2d_grouped_requant_s8(x, wt, s, p, d, g, mode, key, given)
        _equal(got[0], want[0])
        assert got[1] == want[1]
        want = ref.conv2d_grouped_bwd_data_requant_s8(err, wt, s, p, d, g, (h, w), mode, key, given)
        got = be.conv2d_grouped_bwd_data_requant_s8(err, wt, s, p, d, g, (h, w), mode, key, given)
        _equal(got[0], want[0])
        assert got[1] == want[1]


@pytest.mark.parametrize("groups, c", [(2, 8), (8, 8)], ids=["grouped", "depthwise"])
def test_extreme_operands_match_ref(be, ref, groups, c):
    """All -128 / 127 operands: the largest sums, where an int32 slip would show."""
    x = np.full((2, 9, 9, c), -128, np.int8)
    wt = np.full((c, 3, 3, c // groups), 127, np.int8)
    err = np.full((2, 9, 9, c), -128, np.int8)
    _equal(be.conv2d_grouped_s8(x, wt, 1, 2, 2, groups), ref.conv2d_grouped_s8(x, wt, 1, 2, 2, groups))
    _equal(
        be.conv2d_grouped_bwd_data_s8(err, wt, 1, 2, 2, groups, (9, 9)),
        ref.conv2d_grouped_bwd_data_s8(err, wt, 1, 2, 2, groups, (9, 9)),
    )
    _equal(
        be.conv2d_grouped_bwd_weight_s8(err, x, 1, 2, 2, groups, (3, 3)),
        ref.conv2d_grouped_bwd_weight_s8(err, x, 1, 2, 2, groups, (3, 3)),
    )


@pytest.mark.parametrize("groups", [2, 4], ids=["grouped", "depthwise"])
def test_a_weight_gradient_past_int32_turns_int64(host_be, ref, groups):
    """N*OH*OW*127*127 >= 2**31: the gradient is int64 (the polyphase classes' sums added in
    int64, not in int32) and equals ref's."""
    x = np.full((160, 30, 30, 4), -128, np.int8)
    err = np.full((160, 30, 30, 4), 127, np.int8)
    got = host_be.conv2d_grouped_bwd_weight_s8(err, x, 1, 2, 2, groups, (3, 3))
    assert got.dtype == np.int64
    _equal(got, ref.conv2d_grouped_bwd_weight_s8(err, x, 1, 2, 2, groups, (3, 3)))


# ---------------------------------------------------------------- the CPU's native grouped conv
# (n, h, w, groups, channels per group, outputs per group, kernel, stride, pad, dilation):
# groups 2, 3, 4 and 8; 1 to 40 channels per group, odd ones; kernels 1 and 3, strides 1 and 2,
# dilations 1 and 2, pads 0 and 1; batch 1 and odd. Every pass's algorithm comes up: the
# in-place 1x1, the group patches, strided backward data's residue classes (with a class that
# meets no tap: a 1x1 at stride 2), and on AVX2 the lane kernels (conv_grouped_direct.cpp: up to
# 128 outputs a group, 1 to 4 lane vectors a block with a partial last one, more than 4 in
# blocks, odd channel counts padded to pairs, an odd batch's last image paired with zeros; wider
# groups stay on the GEMM).
NATIVE_CASES = [
    (1, 9, 7, 2, 1, 3, 3, 1, 1, 1),
    (3, 8, 11, 3, 5, 7, 3, 2, 1, 1),
    (1, 10, 10, 4, 17, 9, 3, 2, 0, 2),
    (3, 7, 9, 8, 8, 8, 3, 2, 1, 1),
    (1, 12, 6, 8, 3, 1, 1, 1, 0, 1),
    (5, 6, 6, 2, 40, 33, 1, 2, 0, 1),
    (1, 11, 13, 3, 33, 40, 3, 1, 1, 2),
    (3, 5, 8, 4, 7, 12, 1, 1, 1, 1),
    (1, 9, 9, 2, 24, 24, 3, 2, 1, 2),
    (3, 6, 7, 8, 1, 2, 3, 1, 0, 1),
    (2, 7, 6, 2, 3, 29, 3, 1, 1, 1),  # 4 lane vectors of outputs, the last 5 lanes wide
    (1, 6, 9, 3, 31, 2, 3, 2, 1, 1),  # backward data: 31 input channels on the lanes, by classes
    (3, 5, 7, 2, 9, 75, 3, 2, 1, 1),  # 10 lane vectors: blocks of 4, 4 and 2, the last 3 lanes wide
]
NATIVE_IDS = [f"n{c[0]}h{c[1]}w{c[2]}g{c[3]}cg{c[4]}og{c[5]}k{c[6]}s{c[7]}p{c[8]}d{c[9]}" for c in NATIVE_CASES]


def _native_operands(case, seed):
    n, h, w, g, cg, og, k, s, p, d = case
    rng = np.random.default_rng(seed)
    oh, ow = ((size + 2 * p - (k - 1) * d - 1) // s + 1 for size in (h, w))
    x = rng.integers(-128, 128, (n, h, w, g * cg), dtype=np.int8)
    wt = rng.integers(-128, 128, (g * og, k, k, cg), dtype=np.int8)
    err = rng.integers(-128, 128, (n, oh, ow, g * og), dtype=np.int8)
    return x, wt, err


@pytest.mark.parametrize("case", NATIVE_CASES, ids=NATIVE_IDS)
def test_native_grouped_conv_matches_ref(cpu_isa, threads, ref, case):
    """Sums and NITI's requantized int8 (round, stochastic) of the three passes, bit for bit."""
    n, h, w, g, cg, og, k, s, p, d = case
    x, wt, err = _native_operands(case, 5)
    _equal(cpu_isa.conv2d_grouped_s8(x, wt, s, p, d, g), ref.conv2d_grouped_s8(x, wt, s, p, d, g))
    _equal(
        cpu_isa.conv2d_grouped_bwd_data_s8(err, wt, s, p, d, g, (h, w)),
        ref.conv2d_grouped_bwd_data_s8(err, wt, s, p, d, g, (h, w)),
    )
    _equal(
        cpu_isa.conv2d_grouped_bwd_weight_s8(err, x, s, p, d, g, (k, k)),
        ref.conv2d_grouped_bwd_weight_s8(err, x, s, p, d, g, (k, k)),
    )
    key = RngKey(seed=3, step=1, tensor_id=5)
    for mode, given in (("round", None), ("sto", None), ("psto", 9)):
        want = ref.conv2d_grouped_requant_s8(x, wt, s, p, d, g, mode, key, given)
        got = cpu_isa.conv2d_grouped_requant_s8(x, wt, s, p, d, g, mode, key, given)
        _equal(got[0], want[0])
        assert got[1] == want[1]
        want = ref.conv2d_grouped_bwd_data_requant_s8(err, wt, s, p, d, g, (h, w), mode, key, given)
        got = cpu_isa.conv2d_grouped_bwd_data_requant_s8(err, wt, s, p, d, g, (h, w), mode, key, given)
        _equal(got[0], want[0])
        assert got[1] == want[1]


def test_native_grouped_conv_past_int32_depths(ref):
    """A weight gradient whose pixel count passes int32's exact depth: int64 sums, as ref's."""
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    x = np.full((160, 30, 30, 6), -128, np.int8)
    err = np.full((160, 30, 30, 4), 127, np.int8)
    got = native.conv2d_grouped_bwd_weight_s8(err, x, 1, 1, 1, 2, (3, 3))
    assert got.dtype == np.int64
    _equal(got, ref.conv2d_grouped_bwd_weight_s8(err, x, 1, 1, 1, 2, (3, 3)))


# (case, the algorithm of forward, backward data, backward weight on the GEMM ISAs, the same on
# AVX2, where groups of up to 128 outputs take the lane kernels): cpu_ops/conv_grouped.h
LANES = ("direct_lanes", "direct_lanes", "pixel_pair_lanes")
ALGORITHM_PINS = [
    (
        (2, 8, 8, 8, 30, 30, 1, 1, 0, 1),
        ("gemm_1x1_in_place",) * 3,
        LANES,
    ),
    (
        (1, 8, 8, 2, 100, 100, 1, 1, 0, 1),
        ("gemm_1x1_in_place",) * 3,
        ("direct_lanes", "direct_lanes", "gemm_1x1_in_place"),
    ),
    ((2, 8, 8, 8, 16, 16, 3, 1, 1, 1), ("group_patches_gemm",) * 3, LANES),  # ResNeXt's grouped 3x3
    (
        (2, 16, 16, 8, 8, 8, 3, 2, 1, 1),
        ("group_patches_gemm", "residue_class_gemms", "group_patches_gemm"),
        ("direct_lanes", "residue_class_lanes", "pixel_pair_lanes"),
    ),
    ((2, 16, 16, 4, 16, 16, 3, 1, 2, 2), ("group_patches_gemm",) * 3, LANES),  # dilated
    ((2, 8, 8, 2, 64, 64, 3, 1, 1, 1), ("group_patches_gemm",) * 3, LANES),  # 8 lane vectors in 2 blocks
    ((1, 5, 6, 2, 130, 136, 3, 1, 1, 1), ("group_patches_gemm",) * 3, ("group_patches_gemm",) * 3),  # too wide
    (
        (1, 7, 7, 2, 136, 24, 3, 2, 1, 1),
        ("group_patches_gemm", "residue_class_gemms", "group_patches_gemm"),
        ("direct_lanes", "residue_class_gemms", "pixel_pair_lanes"),  # backward data's 136 lanes: the GEMM's
    ),
]


@pytest.mark.parametrize("cpu_isa", ["avx2", "scalar"], indirect=True)
@pytest.mark.parametrize("case, gemm, avx2", ALGORITHM_PINS, ids=[str(c) for c, _, _ in ALGORITHM_PINS])
def test_cpu_grouped_conv_takes_the_native_path(cpu_isa, ref, monkeypatch, case, gemm, avx2):
    """The CpuBackend runs a grouped (not depthwise) conv in one native call a pass: with the
    per-group composition's dense and dilated hooks made to fail, every pass still gives ref's
    bits, and each takes the algorithm pinned for its shape and ISA."""
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    cpu = cpu_isa
    n, h, w, g, cg, og, k, s, p, d = case
    x, wt, err = _native_operands(case, 6)

    def composed(*args, **kwargs):
        raise AssertionError("a grouped conv left the native path for grouped_hooks.py's per-group products")

    for hook in ("conv2d_s8", "conv2d_bwd_data_s8", "conv2d_bwd_weight_s8", "requantize", "conv2d_dilated_s8"):
        monkeypatch.setattr(cpu, hook, composed)
    for hook in ("conv2d_dilated_bwd_data_s8", "conv2d_dilated_bwd_weight_s8"):
        monkeypatch.setattr(cpu, hook, composed)
    _equal(cpu.conv2d_grouped_requant_s8(x, wt, s, p, d, g, "round", None)[0],
           ref.conv2d_grouped_requant_s8(x, wt, s, p, d, g, "round", None)[0])  # fmt: skip
    _equal(
        cpu.conv2d_grouped_bwd_data_requant_s8(err, wt, s, p, d, g, (h, w), "round", None)[0],
        ref.conv2d_grouped_bwd_data_requant_s8(err, wt, s, p, d, g, (h, w), "round", None)[0],
    )
    _equal(
        cpu.conv2d_grouped_bwd_weight_s8(err, x, s, p, d, g, (k, k)),
        ref.conv2d_grouped_bwd_weight_s8(err, x, s, p, d, g, (k, k)),
    )
    passes = ("forward", "backward_data", "backward_weight")
    want = avx2 if native.isa() == "avx2" else gemm
    assert tuple(native.grouped_algorithm(ps, x, wt, s, p, d, g) for ps in passes) == want


@pytest.mark.parametrize("cpu_isa", ["avx2"], indirect=True)
@pytest.mark.parametrize("fill", [-128, 127])
def test_lane_kernels_take_the_range_of_their_sums(cpu_isa, ref, fill):
    """The lane kernels hand the requantizer max |sums| from their registers (no pass over the
    tensor): at the extremes of int8, of either sign, that max decides the shift, and it must be
    ref's."""
    x = np.full((2, 9, 9, 16), -128, np.int8)
    wt = np.full((16, 3, 3, 2), fill, np.int8)
    err = np.full((2, 9, 9, 16), -128, np.int8)
    key = RngKey(seed=5, step=2, tensor_id=1)
    for mode in ("round", "sto"):
        got = cpu_isa.conv2d_grouped_requant_s8(x, wt, 1, 1, 1, 8, mode, key)
        want = ref.conv2d_grouped_requant_s8(x, wt, 1, 1, 1, 8, mode, key)
        _equal(got[0], want[0])
        assert got[1] == want[1]
        got = cpu_isa.conv2d_grouped_bwd_data_requant_s8(err, wt, 2, 1, 1, 8, (17, 17), mode, key)
        want = ref.conv2d_grouped_bwd_data_requant_s8(err, wt, 2, 1, 1, 8, (17, 17), mode, key)
        _equal(got[0], want[0])
        assert got[1] == want[1]


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda n: n.conv2d_grouped_s8(np.zeros((1, 4, 4, 6), np.int8), np.zeros((4, 3, 3, 3), np.int8), 1, 1, 1, 4),
            "do not make 4 groups",
        ),
        (
            lambda n: n.conv2d_grouped_s8(np.zeros((1, 4, 4, 6), np.int8), np.zeros((4, 3, 3, 3), np.int8), 1, 0, 2, 2),
            "does not fit",
        ),
        (
            lambda n: n.conv2d_grouped_bwd_data_s8(
                np.zeros((1, 3, 3, 4), np.int8), np.zeros((4, 3, 3, 3), np.int8), 1, 1, 1, 2, (4, 4)
            ),
            "does not match in_hw",
        ),
        (
            lambda n: n.conv2d_grouped_s8(np.zeros((1, 4, 4, 6), np.int8), np.zeros((4, 3, 3, 3), np.int8), 1, 1, 0, 2),
            "dilation must be positive",
        ),
    ],
    ids=["groups", "kernel", "err", "dilation"],
)
def test_native_grouped_conv_refuses_bad_shapes(call, message):
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    with pytest.raises(ValueError, match=message):
        call(native)


@pytest.mark.parametrize("case", NATIVE_CASES[:6], ids=NATIVE_IDS[:6])
def test_native_grouped_scratch_is_what_the_plan_counts(threads, case):
    """Each pass keeps at most the bytes grouped_scratch_bytes lists for it (the memory planner's
    count, cpu_scratch.py), and at one thread nearly all of them (the GEMM's blocks are sized
    for the pool, so a KiB of slack on these small shapes)."""
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    from dsptrain.backends.ops_cpu import CpuBackend

    cpu = CpuBackend()
    native.set_threads(threads)  # CpuBackend() keeps the count; the fixture restores it
    n, h, w, g, cg, og, k, s, p, d = case
    x, wt, err = _native_operands(case, 7)
    sizes = [n, h, w, g * cg, g * og, k, k, s, p, d, g]
    runs = {
        ("forward", True): lambda: cpu.conv2d_grouped_requant_s8(x, wt, s, p, d, g, "round", None),
        ("forward", False): lambda: cpu.conv2d_grouped_s8(x, wt, s, p, d, g),
        ("backward_data", True): lambda: cpu.conv2d_grouped_bwd_data_requant_s8(
            err, wt, s, p, d, g, (h, w), "round", None
        ),
        ("backward_data", False): lambda: cpu.conv2d_grouped_bwd_data_s8(err, wt, s, p, d, g, (h, w)),
        ("backward_weight", False): lambda: cpu.conv2d_grouped_bwd_weight_s8(err, x, s, p, d, g, (k, k)),
    }
    for (pass_, requant), run in runs.items():
        cpu.release_scratch()
        run()
        kept = cpu.release_scratch()
        planned = sum(dict(native.grouped_scratch_bytes(pass_, sizes, requant)).values())
        assert 0 < kept <= planned, (pass_, requant, kept, planned)
        if threads == 1:
            assert planned <= 1.05 * kept + 1024, (pass_, requant, kept, planned)


def test_the_plan_counts_a_grouped_convs_scratch():
    """A lowered NITI grouped conv declares its product, so the CPU sizes its scratch for the
    memory plan; a depthwise one (grouped_hooks.py's route) counts none here."""
    pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    import dsptrain
    from dsptrain import _cpu_ops as native
    from dsptrain.backends.ops_cpu import CpuBackend
    from dsptrain.graph import lower
    from dsptrain.nn import Conv2d, Flatten, Linear, Model

    model = Model(
        "grouped",
        (12, 12, 8),
        10,
        (
            Conv2d("c1", 8, 16, 3, padding=1),
            Conv2d("g3", 16, 24, 3, stride=2, padding=1, groups=4),
            Conv2d("dw", 24, 24, 3, padding=2, dilation=2, groups=24),
            Flatten("flatten"),
            Linear("fc", 6 * 6 * 24, 10),
        ),
    )
    graph = lower(model, dsptrain.load_recipe("niti"), batch=4)
    cpu = CpuBackend()
    for name, pass_ in (("g3.fwd", "forward"), ("g3.bwd_data", "backward_data"), ("g3.bwd_weight", "backward_weight")):
        op = graph.op(name)
        want = native.grouped_scratch_bytes(pass_, [3, 12, 12, 16, 24, 3, 3, 2, 1, 1, 4], op.is_requant())
        assert cpu.scratch_bytes(graph, op, 3) == dict(want) != {}, name
    assert cpu.scratch_bytes(graph, graph.op("dw.fwd"), 3) == {}
