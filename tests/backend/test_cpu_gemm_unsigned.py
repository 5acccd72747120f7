"""AVX2's int8 GEMM kernels: A blocks with no negative value (a ReLU's output) run on
vpmaddubsw with A unsigned, signed A blocks against B panels with none (the weight
gradient's activations) on vpmaddubsw with B unsigned, signed A blocks within [-64, 64]
but for a few outliers (backward data's errors) on vpmaddubsw with B offset by 128 (pair
sums exact in int16 every way; the outliers' rests added after the kernel), the rest on
the int16 vpmaddwd kernel. All bit-exact against ops_ref on random,
ragged and extreme inputs (-128 everywhere), and pinned: native.gemm_block_counts says
which kernel each A block (task rows x K block) took."""

from __future__ import annotations

import numpy as np
import pytest

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# kernel_avx2's K block (kc): A is packed KC deep at a time, each block picking its kernel.
KC = 768

# M off the 6-row tile and the task split, K off the 4-group and the KC-deep K block, N off
# the 8-column panel; K up to three K blocks.
SHAPES = [(1, 1, 1), (7, 5, 3), (13, 2, 9), (64, 576, 128), (100, 1030, 37), (37, 1537, 17), (250, 96, 24)]


@pytest.fixture
def avx2(monkeypatch):
    from dsptrain.backends.ops_cpu import ISA_ENV, CpuBackend

    if "avx2" not in native.supported_isas():
        pytest.skip(f"this CPU/build has no avx2 (has {', '.join(native.supported_isas())})")
    monkeypatch.setenv(ISA_ENV, "avx2")
    backend = CpuBackend()
    yield backend
    monkeypatch.delenv(ISA_ENV)
    CpuBackend()


def blocks(run, pairs: bool = False) -> dict:
    """The A blocks each kernel took while `run()` ran; with `pairs`, also "pairs": the
    blocks whose byte kernel took B's panels two at a time, and "outliers_in_pairs": the
    small-A blocks whose pair kernel added their outliers itself."""
    native.gemm_block_counts(reset=True)
    run()
    counts = native.gemm_block_counts(reset=True)
    if not pairs:
        del counts["pairs"], counts["outliers_in_pairs"]
    return counts


def one_thread_blocks(run, pairs: bool = False) -> dict:
    """blocks(run, pairs) on one thread (split_tasks' tasks fixed by the shape alone)."""
    previous = native.threads()
    native.set_threads(1)
    try:
        return blocks(run, pairs)
    finally:
        native.set_threads(previous)


@pytest.mark.parametrize("m,k,n", SHAPES, ids=lambda v: str(v))
def test_nonnegative_a_takes_the_unsigned_kernel(avx2, ref, threads, m, k, n):
    rng = np.random.default_rng(m * 31 + k * 7 + n)
    a, b = cases.int8(rng, (m, k), 0, 127), cases.int8(rng, (n, k))
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts["signed"] == counts["b_unsigned"] == 0 and counts["unsigned"] > 0


@pytest.mark.parametrize("m,k,n", SHAPES, ids=lambda v: str(v))
def test_signed_a_takes_the_int16_kernel(avx2, ref, threads, m, k, n):
    rng = np.random.default_rng(m * 13 + k * 5 + n)
    a, b = cases.int8(rng, (m, k)), cases.int8(rng, (n, k))
    a[:, ::512] = -128  # in every A block (each K block's first column): signed, beyond [-64, 64]
    b[:, ::512] = -1  # and a negative value in every B panel's K block (else B would be the unsigned side)
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts["signed"] > 0 and counts["unsigned"] == counts["b_unsigned"] == 0


@pytest.mark.parametrize("m,k,n", SHAPES, ids=lambda v: str(v))
def test_nonnegative_b_takes_the_b_unsigned_kernel(avx2, ref, threads, m, k, n):
    rng = np.random.default_rng(m * 17 + k * 3 + n)
    a, b = cases.int8(rng, (m, k)), cases.int8(rng, (n, k), 0, 127)
    a[:, ::512] = -128  # every A block signed
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts["b_unsigned"] > 0 and counts["unsigned"] == 0


def test_one_negative_value_sends_only_its_block_to_the_int16_kernel(avx2, ref):
    """K = 2 KC + 6 is three K blocks (KC, KC, 6); one row's -1 in the second block sends
    that block alone, on 1 thread and one 8-column panel (one task), to the int16 kernel."""
    rng = np.random.default_rng(5)
    k = 2 * KC + 6
    a, b = cases.int8(rng, (40, k), 0, 127), cases.int8(rng, (8, k))
    a[17, KC + 88] = -1
    got = {}
    counts = one_thread_blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts == {"signed": 1, "unsigned": 2, "b_unsigned": 0, "small_a": 0}


@pytest.mark.parametrize(
    "va,vb,kernel",
    [
        (127, -128, "unsigned"),
        (127, 127, "unsigned"),
        (0, -128, "unsigned"),
        (-128, -128, "signed"),
        (-65, -128, "signed"),
        (-1, -128, "small_a"),
        (-64, -128, "small_a"),
        (-64, 127, "b_unsigned"),
        (-128, 127, "b_unsigned"),
        (-128, 0, "b_unsigned"),
    ],
)
def test_extremes_over_every_k_block(avx2, ref, va, vb, kernel):
    """Pair sums at the ends of int16 (127 x -128 x 2 = -32512) and -128 everywhere; the byte
    kernels over B's panels in pairs (9 panels: 4 pairs and a ragged single)."""
    a, b = np.full((45, 1540), va, np.int8), np.full((67, 1540), vb, np.int8)
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)), pairs=True)
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    pairs = counts.pop("pairs")
    assert {name for name, count in counts.items() if count} == {kernel}
    assert (pairs > 0) == (kernel != "signed")


# The small-A kernel's shapes: N of at least 8 panels (kSmallAMinPanels), ragged.
SMALL_A_SHAPES = [(1, 1, 64), (7, 5, 71), (13, 2, 65), (64, 576, 128), (100, 1030, 97), (37, 1537, 64), (250, 96, 200)]


@pytest.mark.parametrize("m,k,n", SMALL_A_SHAPES, ids=lambda v: str(v))
def test_signed_a_within_64_takes_the_small_a_kernel(avx2, ref, threads, m, k, n):
    """Signed x signed (backward data: errors x weights) with A in [-64, 64]: B offset by 128."""
    rng = np.random.default_rng(m * 19 + k * 11 + n)
    a, b = cases.int8(rng, (m, k), -64, 64), cases.int8(rng, (n, k))
    a[:, ::512] = -64  # every A block signed
    b[:, ::512] = -128  # every B panel's K block signed, -128 included
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts["small_a"] > 0 and counts["signed"] == counts["unsigned"] == counts["b_unsigned"] == 0


@pytest.mark.parametrize("n", [56, 11, 1])
def test_few_panels_keep_the_int16_kernel(avx2, ref, n):
    """Under 8 B panels the small-A kernel's extra pass over A does not pay: int16."""
    rng = np.random.default_rng(n)
    a, b = cases.int8(rng, (50, 700), -64, 64), cases.int8(rng, (n, 700))
    a[:, ::512], b[:, ::512] = -64, -1
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert {name for name, count in counts.items() if count} == {"signed"}


def test_small_a_pair_sums_at_both_ends(avx2, ref):
    """a = +-64 against b + 128 = 255 and 0: pair sums of +-32640, K over three blocks, with
    the row corrections of rows whose sums differ."""
    k = 2 * KC + 6
    a = np.where(np.arange(k) % 4 < 2, 64, -64).astype(np.int8)[None, :].repeat(13, 0)  # pairs (64, 64), (-64, -64)
    a[::2] = -a[::2]
    a[5, :300] = -64
    b = np.where(np.arange(k) % 8 < 4, 127, -128).astype(np.int8)[None, :].repeat(67, 0)
    b[3] = -b[3] - 1
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert {name for name, count in counts.items() if count} == {"small_a"}


def with_outliers(rng, a: np.ndarray, share: float) -> np.ndarray:
    """a with about `share` of its values replaced by ones beyond [-64, 64], ends included."""
    beyond = rng.random(a.shape) < share
    a[beyond] = rng.choice(np.array([-128, -127, -100, -65, 65, 100, 126, 127], np.int8), int(beyond.sum()))
    return a


# Blocks of at least a few hundred values: room for outliers under 1 in 128.
OUTLIER_SHAPES = [(64, 576, 128), (100, 1030, 97), (37, 1537, 64), (250, 96, 200), (13, 700, 65), (7, 1400, 71)]


@pytest.mark.parametrize("m,k,n", OUTLIER_SHAPES, ids=lambda v: str(v))
def test_a_few_values_past_64_stay_on_the_small_a_kernel(avx2, ref, threads, m, k, n):
    """Backward data's errors are heavy-tailed: a few values beyond [-64, 64] (here 0.3 %,
    under kSmallAOutlierShare's 1 in 128) are packed clamped, their rests added after the
    kernel (add_outliers), at tile rows, K depths mod 4 and ragged last panels."""
    rng = np.random.default_rng(m * 23 + k * 13 + n)
    a, b = with_outliers(rng, cases.int8(rng, (m, k), -64, 64), 0.003), cases.int8(rng, (n, k))
    assert 0 < np.count_nonzero(np.abs(a.astype(np.int16)) > 64) < a.size / 128
    a[:, ::512] = -64  # every A block signed
    b[:, ::512] = -128
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert {name for name, count in counts.items() if count} == {"small_a"}


@pytest.mark.parametrize("va", [-128, -65, 65, 127])
@pytest.mark.parametrize("vb", [-128, 127])
def test_outliers_at_the_ends_of_int8(avx2, ref, va, vb):
    """Every row of a tile with an outlier at every depth mod 4, of the extremes, against B
    at its extremes: rests of -64 and +63 against b + 128 = 0 and 255."""
    m, k, n = 12, 2 * KC + 6, 67  # two tiles, three K blocks (the last, 6 deep, too small for one), a ragged last panel
    a = np.where(np.arange(k) % 2 == 1, 64, -64).astype(np.int8)[None, :].repeat(m, 0)  # signed, at +-64
    b = np.full((n, k), vb, np.int8)
    b[::3] = -b[::3] - 1
    for row in range(m):
        a[row, [row, row + KC + 1]] = va  # depths mod 4 0..3, in the first two K blocks
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert {name for name, count in counts.items() if count} == {"small_a"}


def test_outliers_past_the_share_send_only_their_block_to_the_int16_kernel(avx2, ref):
    """K = 2 KC + 6 is three K blocks (KC, KC, 6); the last, 40 x 6 = 240 values, keeps one
    outlier (240 / 128) on the small-A kernel and sends two to the int16 kernel. One thread
    runs two tasks of 4 panels each (split_tasks), each packing its own 3 A blocks."""
    rng = np.random.default_rng(6)
    k = 2 * KC + 6
    a, b = cases.int8(rng, (40, k), -64, 64), cases.int8(rng, (64, k))
    a[:, ::512] = -1
    b[:, ::512] = -1
    a[3, 100] = a[7, KC + 88] = -128  # one outlier in each of the first two blocks
    a[3, 101] = a[7, KC + 89] = 1  # (their pairs over vpmaddubsw's budget: |x0| + |x1| > 128)
    a[23, k - 1], a[23, k - 2] = 65, 64
    got = {}
    counts = one_thread_blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts == {"signed": 0, "unsigned": 0, "b_unsigned": 0, "small_a": 6}
    a[30, 2 * KC], a[30, 2 * KC + 1] = -65, -64
    counts = one_thread_blocks(lambda: got.__setitem__("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts == {"signed": 2, "unsigned": 0, "b_unsigned": 0, "small_a": 4}


def values_past_64_within_budget(rng, m: int, k: int) -> np.ndarray:
    """[m, k] errors near 0 (in [-1, 1]) with 3 % of the even depths at -128, -127, -100,
    65, 100 or 127 (their odd partners 0 beside -128): every pair's |x0| + |x1| <= 128, so
    none is an outlier, though the block holds many more values past 64 than 1 in 128.
    The last row's last depth (even where k is odd, its partner the packing's zero) -128."""
    a = cases.int8(rng, (m, k), -1, 1)
    even = np.zeros((m, k), bool)
    even[:, ::2] = rng.random((m, (k + 1) // 2)) < 0.03
    a[even] = rng.choice(np.array([-128, -127, -100, 65, 100, 127], np.int8), int(even.sum()))
    partner = np.roll(even & (a == -128), 1, axis=1)
    partner[:, 0] = False
    a[partner] = 0
    a[-1, -1] = -128
    if k % 2 == 0:
        a[-1, -2] = 0
    return a


@pytest.mark.parametrize("m,k,n", [(13, 1031, 136), (100, 600, 97), (37, 95, 128), (250, 200, 64)], ids=str)
def test_values_past_64_whose_pairs_stay_within_budget_are_not_outliers(avx2, ref, threads, m, k, n):
    """vpmaddubsw's pair sums u0 x0 + u1 x1 (u = b + 128 <= 255) are exact wherever
    |x0| + |x1| <= 128: a value past 64 beside a small partner is packed as it is, not
    listed (pack_a_small's pair test, 32 bytes at a time and in the tail). 3 % such values
    (four times kSmallAOutlierShare) keep every block on the small-A kernel with no outlier
    to add, B at its ends included."""
    rng = np.random.default_rng(m + 7 * k + n)
    a, b = values_past_64_within_budget(rng, m, k), cases.int8(rng, (n, k))
    assert np.count_nonzero(np.abs(a.astype(np.int16)) > 64) > a.size / 128
    b[-1], b[0] = 127, -128
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)), pairs=True)
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts["small_a"] > 0 and counts["outliers_in_pairs"] == 0
    assert counts["signed"] == counts["unsigned"] == counts["b_unsigned"] == 0


def test_pair_slots_pad_the_rows_with_fewer_outliers(avx2, ref):
    """The pair kernel adds a tile's outliers in slots of one per row (micro_pair_small_a_outliers):
    rows of one tile with 0, 1, 3 and 7 outliers (the others' slots padded with zero rests),
    a last tile of one row, depths mod 4 0..3 and both ends of int8 over budget (beside a 64 of
    the same sign), K over two blocks. One thread: two tasks of 17 panels (8 pairs and a
    single last one, ragged in the second)."""
    rng = np.random.default_rng(5)
    m, k, n = 13, 1100, 267
    a, b = cases.int8(rng, (m, k), -64, 64), cases.int8(rng, (n, k))
    b[-1], b[0] = 127, -128
    for row, count in ((1, 1), (2, 3), (4, 7), (12, 5)):
        depths = rng.choice(np.arange(0, k, 2), count, replace=False) + rng.integers(0, 2, count)
        for d in depths:
            value = rng.choice(np.array([-128, -100, -65, 65, 100, 127], np.int8))
            a[row, d] = value
            a[row, d ^ 1] = 64 if value > 0 else -64
    a[12, -1], a[12, -2] = 127, 64
    got = {}
    counts = one_thread_blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)), pairs=True)
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts["signed"] == counts["unsigned"] == counts["b_unsigned"] == 0
    assert counts["outliers_in_pairs"] > 0


def test_outliers_crowded_into_one_row_a_tile_fall_back_to_add_outliers(avx2, ref):
    """Slots pad every row to the tile's row with most outliers: 30 in one row of each of 32
    tiles (under 1 in 128 of the block) would need 6 x 30 x 32 entries, past
    small_a_max_slot_entries, so the block gets no slots and its pairs leave the outliers to
    add_outliers after each chunk of rows. One thread, two tasks of 16 panels."""
    rng = np.random.default_rng(9)
    m, k, n = 192, KC, 256
    a, b = cases.int8(rng, (m, k), -64, 64), cases.int8(rng, (n, k))
    for row in range(0, m, 6):
        depths = rng.choice(np.arange(0, k, 2), 30, replace=False)
        a[row, depths], a[row, depths + 1] = -128, -64
    got = {}
    counts = one_thread_blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)), pairs=True)
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts == {"signed": 0, "unsigned": 0, "b_unsigned": 0, "small_a": 2, "pairs": 2, "outliers_in_pairs": 0}


def test_all_outlier_blocks_take_the_int16_kernel(avx2, ref):
    """Uniform int8 errors (half beyond [-64, 64]) and a block of -128 alone: int16."""
    rng = np.random.default_rng(8)
    b = cases.int8(rng, (70, 600))
    for a in (cases.int8(rng, (30, 600)), np.full((30, 600), -128, np.int8)):
        got = {}
        counts = blocks(lambda a=a, got=got: got.setdefault("c", avx2.gemm_s8(a, b)))
        np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
        assert {name for name, count in counts.items() if count} == {"signed"}


def test_requantized_and_packed_products_agree(avx2, ref):
    """gemm_requant_s8 (the fused rounding) and gemm_packed on a ReLU's output."""
    rng = np.random.default_rng(11)
    a, b = cases.int8(rng, (70, 300), 0, 127), cases.int8(rng, (33, 300))
    want = ref.gemm_s8(a, b)
    np.testing.assert_array_equal(native.gemm_packed(a, native.pack_weights(b)), want)
    for mode in ("round", "sto"):
        key = cases.rng_key(3)
        (got, got_shift), (want_q, want_shift) = (
            avx2.gemm_requant_s8(a, b, mode, key),
            ref.gemm_requant_s8(a, b, mode, key),
        )
        np.testing.assert_array_equal(got, want_q)
        assert got_shift == want_shift


def test_conv_forward_on_relu_input(avx2, ref):
    """An im2col convolution on a ReLU's output: the forward's patches are A, the weight
    gradient's are B (A its signed errors)."""
    rng = np.random.default_rng(12)
    x, w = cases.int8(rng, (2, 9, 9, 16), 0, 127), cases.int8(rng, (24, 3, 3, 16))
    got = {}
    counts = blocks(lambda: got.setdefault("y", avx2.conv2d_s8(x, w, 1, 1)))
    np.testing.assert_array_equal(got["y"], ref.conv2d_s8(x, w, 1, 1))
    assert counts["unsigned"] > 0 and counts["signed"] == 0
    x, err = cases.int8(rng, (64, 8, 8, 256), 0, 127), cases.int8(rng, (64, 8, 8, 256))
    counts = blocks(lambda: got.setdefault("dw", avx2.conv2d_bwd_weight_s8(err, x, 1, 1, (3, 3))))
    np.testing.assert_array_equal(got["dw"], ref.conv2d_bwd_weight_s8(err, x, 1, 1, (3, 3)))
    assert counts["b_unsigned"] > 0 and counts["signed"] == 0


@pytest.mark.parametrize(
    "x_range,err_range,kernel",
    [
        ((0, 127), (-128, 127), "b_unsigned"),
        ((-128, 127), (-64, 64), "small_a"),
        ((-128, 127), "outliers", "small_a"),
        ((-128, 127), "within_budget", "small_a"),
        ((-128, 127), (-128, 127), "signed"),
    ],
)
@pytest.mark.parametrize("x_shape,out_channels", [((2, 9, 9, 16), 24), ((3, 7, 5, 12), 10), ((2, 16, 16, 64), 128)])
def test_panel_weight_gradient_takes_the_byte_kernels(
    avx2, ref, threads, x_range, err_range, kernel, x_shape, out_channels
):
    """conv_panels.cpp's weight gradient (VGG-11's conv1-3 here) picks among the same kernels
    per block of 256 pixels: B (the patches) a ReLU's output, or the errors within [-64, 64]
    (these shapes have 14-72 tap panels; 3 x 3 x 12 channels leaves the last one ragged), the
    byte kernels over the tap panels in pairs (an odd count's last one single)."""
    rng = np.random.default_rng(sum(x_shape) + out_channels)
    x = cases.int8(rng, x_shape, *x_range)
    w = np.zeros((out_channels, 3, 3, x_shape[-1]), np.int8)
    assert native.conv_algorithm("backward_weight", x, w, 1, 1) == "wgrad_panels"
    if err_range == "outliers":  # within [-64, 64] but for 0.3 % (add_outliers on each tile)
        err = with_outliers(rng, cases.int8(rng, (*x_shape[:-1], out_channels), -64, 64), 0.003)
        err.reshape(-1, out_channels)[::256, 0] = -128
    elif err_range == "within_budget":  # past 64 beside small partners (pixels): the strided pair test
        pixels = int(np.prod(x_shape[:-1]))  # err^T's rows are channels, its depth pixels
        err = np.ascontiguousarray(values_past_64_within_budget(rng, out_channels, pixels).T)
        err = err.reshape(*x_shape[:-1], out_channels)
    else:
        err = cases.int8(rng, (*x_shape[:-1], out_channels), *err_range)
        err.reshape(-1, out_channels)[::256] = err_range[0]  # every block's errors signed, at the range's end
    x.reshape(-1, x_shape[-1])[::256] = x_range[0]
    got = {}
    counts = blocks(lambda: got.setdefault("dw", avx2.conv2d_bwd_weight_s8(err, x, 1, 1, (3, 3))), pairs=True)
    np.testing.assert_array_equal(got["dw"], ref.conv2d_bwd_weight_s8(err, x, 1, 1, (3, 3)))
    pairs = counts.pop("pairs")
    assert {name for name, count in counts.items() if count} == {kernel}
    assert (pairs > 0) == (kernel != "signed")


# B panels in pairs (the byte kernels' MicroPairFn, AVX2's 6 x 16 of C): odd panel counts
# (a single panel after the pairs, ragged or whole), a ragged last pair, row tiles short of
# 6 rows, K over three blocks; on 2 threads split_tasks may also give a task an odd range.
PAIR_SHAPES = [(13, 1537, 71), (100, 1030, 78), (7, 1400, 65), (64, 576, 128), (250, 200, 120), (37, 700, 136)]


def pair_inputs(rng, kind: str, m: int, k: int, n: int):
    """(a, b) that take `kind`'s byte kernel in every block."""
    if kind == "unsigned":
        return cases.int8(rng, (m, k), 0, 127), cases.int8(rng, (n, k))
    if kind == "b_unsigned":
        a, b = cases.int8(rng, (m, k)), cases.int8(rng, (n, k), 0, 127)
        a[:, ::512] = -128
        return a, b
    a, b = cases.int8(rng, (m, k), -64, 64), cases.int8(rng, (n, k))
    if kind == "outliers":
        a = with_outliers(rng, a, 0.003)
    a[:, ::512], b[:, ::512] = -64, -128
    return a, b


@pytest.mark.parametrize("kind", ["unsigned", "b_unsigned", "small_a", "outliers"])
@pytest.mark.parametrize("m,k,n", PAIR_SHAPES, ids=lambda v: str(v))
def test_byte_kernels_take_b_panels_in_pairs(avx2, ref, threads, kind, m, k, n):
    rng = np.random.default_rng(m * 29 + k * 3 + n)
    a, b = pair_inputs(rng, kind, m, k, n)
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)), pairs=True)
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    kernel = "small_a" if kind == "outliers" else kind
    assert counts["pairs"] > 0 and counts[kernel] > 0
    assert sum(count for name, count in counts.items() if name not in ("pairs", "outliers_in_pairs", kernel)) == 0


@pytest.mark.parametrize("kind", ["unsigned", "b_unsigned"])
def test_one_panel_runs_the_single_panel_kernel(avx2, ref, kind):
    """A task with one B panel (N <= 8) has no pair: the 6 x 8 kernel, still exact."""
    rng = np.random.default_rng(7)
    a, b = pair_inputs(rng, kind, 40, 600, 5)
    got = {}
    counts = one_thread_blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)))
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts[kind] > 0


def test_pairs_counted_once_per_block(avx2, ref):
    """One thread, M = 60 (one row block; split_tasks splits the 4 panels in two tasks of 2),
    K = 2 KC + 76 (three K blocks): six blocks, each one pair, counted as six."""
    rng = np.random.default_rng(3)
    a, b = pair_inputs(rng, "unsigned", 60, 2 * KC + 76, 32)
    got = {}
    counts = one_thread_blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)), pairs=True)
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts["unsigned"] == 6 and counts["pairs"] == 6


# M off the tile (a last tile of 1-5 rows), N with an odd panel count (the last single
# panel's outliers go through add_outliers) or a ragged last pair, K over 1-3 K blocks
# (each deep enough to keep the outlier put in the last column under 1 in 128); N of at
# least 64 panels, so each of the up to 4 tasks of a row block has kOutlierPairMinPanels.
INSIDE_PAIR_SHAPES = [(13, 1400, 517), (100, 1100, 510), (7, 1400, 1030), (193, 700, 512)]


@pytest.mark.parametrize("m,k,n", INSIDE_PAIR_SHAPES, ids=lambda v: str(v))
def test_pairs_add_their_tiles_outliers(avx2, ref, threads, m, k, n):
    """Small-A blocks with outliers (0.3 %, at the ends of int8) run as pairs that add each
    tile's outliers to their sums before C (micro_pair_small_a_outliers), an outlier in the
    last row and column and B at both ends included; every such block counted."""
    rng = np.random.default_rng(m * 17 + k * 5 + n)
    a, b = with_outliers(rng, cases.int8(rng, (m, k), -64, 64), 0.003), cases.int8(rng, (n, k))
    a[:, ::512] = -64  # every A block signed
    a[-1, -1], a[0, 0] = -128, 127
    b[:, ::512] = -128
    b[-1], b[0, :] = 127, -128
    got = {}
    counts = blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)), pairs=True)
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts["signed"] == counts["unsigned"] == counts["b_unsigned"] == 0
    # (a block of M = 7's one-row tile may hold no outlier: a pair block without them)
    assert 0 < counts["outliers_in_pairs"] <= counts["pairs"] == counts["small_a"]


@pytest.mark.parametrize("n,inside", [(520, 2), (72, 0)])
def test_outlier_dense_tile_inside_the_pairs(avx2, ref, n, inside):
    """One thread, one row block: a tile with outliers at 4 depths of each row (the block
    stays under 1 in 128) and one in the last row and column. split_tasks gives the row
    block to two tasks: of 33 and 32 panels (pairs and a single last panel), whose pairs
    add the outliers, or of 5 and 4 (under kOutlierPairMinPanels), which add them after
    each chunk (add_outliers). Each task's block counted once."""
    rng = np.random.default_rng(21)
    m, k = 30, 512
    a, b = cases.int8(rng, (m, k), -64, 64), cases.int8(rng, (n, k))
    a[6:12, 200:204] = np.array([-128, 127, -65, 65], np.int8)
    a[-1, -1] = -128
    b[-1], b[0] = 127, -128
    got = {}
    counts = one_thread_blocks(lambda: got.setdefault("c", avx2.gemm_s8(a, b)), pairs=True)
    np.testing.assert_array_equal(got["c"], ref.gemm_s8(a, b))
    assert counts == {
        "signed": 0,
        "unsigned": 0,
        "b_unsigned": 0,
        "small_a": 2,
        "pairs": 2,
        "outliers_in_pairs": inside,
    }
