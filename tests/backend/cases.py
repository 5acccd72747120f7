"""Random cases for every backend hook, shared by the CPU and DSP backend tests.

Each generator yields (case id, args) for one hook; a test runs the hook on a backend
and on `ops_ref` and requires bit-identical results. Shapes are ragged on purpose:
K not a multiple of 4, sizes of 1, M and N not multiples of any tile size; values
reach -128 and 127.
"""

from __future__ import annotations

import numpy as np
from dsptrain.numerics import RngKey

# (M, K, N) for gemm_s8: tiny, ragged, one long K, and tile-boundary sizes.
GEMM_SHAPES = [
    (1, 1, 1),
    (1, 7, 1),
    (3, 5, 2),
    (7, 4, 17),
    (13, 27, 64),
    (65, 130, 70),
    (6, 64, 64),
    (97, 513, 33),
    (200, 1027, 129),
    (5, 4099, 3),
]

# (N, H, W, C, O, K, stride, pad) for the convolutions.
CONV_SHAPES = [
    (1, 1, 1, 1, 1, 1, 1, 0),
    (2, 5, 5, 3, 4, 3, 1, 1),
    (2, 8, 7, 5, 6, 3, 2, 1),
    (1, 9, 9, 2, 3, 3, 2, 0),
    (3, 6, 6, 16, 8, 1, 1, 0),
    (2, 7, 7, 3, 5, 5, 1, 2),
    (1, 10, 8, 4, 7, 3, 3, 1),
    (2, 12, 12, 32, 64, 3, 1, 1),
]

ROUNDING = ("round", "psto", "sto")


def int8(rng: np.random.Generator, shape, low: int = -128, high: int = 127) -> np.ndarray:
    return rng.integers(low, high + 1, size=shape, dtype=np.int8)


def rng_key(i: int) -> RngKey:
    return RngKey(seed=1234 + i, step=7 * i + 1, tensor_id=3 + i, offset=11 * i)


def gemm_cases(seed: int = 0):
    rng = np.random.default_rng(seed)
    for m, k, n in GEMM_SHAPES:
        yield f"{m}x{k}x{n}", (int8(rng, (m, k)), int8(rng, (n, k)))


def gemm_extreme_cases():
    """All -128 / all 127 operands over long K: the worst case of the VNNI offset trick."""
    for k in (1, 3, 4, 1000, 4099, 131071):  # 131071 * 128 * 128 still fits int32
        for va, vb in ((-128, -128), (-128, 127), (127, -128), (127, 127)):
            m, n = 7, 19
            yield f"k{k}_{va}x{vb}", (np.full((m, k), va, np.int8), np.full((n, k), vb, np.int8))


def conv_cases(seed: int = 1, shapes=CONV_SHAPES):
    rng = np.random.default_rng(seed)
    for n, h, w, c, o, k, stride, pad in shapes:
        x = int8(rng, (n, h, w, c))
        wt = int8(rng, (o, k, k, c))
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        err = int8(rng, (n, oh, ow, o))
        yield f"n{n}h{h}w{w}c{c}o{o}k{k}s{stride}p{pad}", dict(x=x, w=wt, err=err, stride=stride, pad=pad)


def acc_cases(seed: int = 2):
    """int32/int64 accumulators with magnitudes of every size, exact powers of two and halves."""
    rng = np.random.default_rng(seed)
    for dtype, hi in ((np.int32, 2**31 - 1), (np.int64, 2**40)):
        for size in (1, 17, 1000, 70001):
            acc = rng.integers(-hi, hi, size=size, dtype=dtype)
            acc[: size // 3] //= rng.integers(1, 2**20, size=size // 3).astype(dtype)
            yield f"{np.dtype(dtype).name}_{size}", acc
    special = np.array(
        [
            0,
            1,
            -1,
            2,
            -2,
            3,
            127,
            -127,
            128,
            -128,
            255,
            256,
            383,
            384,
            -384,
            2**20 + 2**19,
            -(2**20 + 2**19),
            2**31 - 1,
            -(2**31) + 1,
        ],
        dtype=np.int64,
    )
    yield "special_int64", special
    yield "special_int32", special.astype(np.int32)
    yield "zeros", np.zeros((3, 4), np.int32)


def pool_cases(seed: int = 3):
    rng = np.random.default_rng(seed)
    for n, h, w, c, kernel, stride in (
        (1, 2, 2, 1, 2, 2),
        (2, 8, 8, 3, 2, 2),
        (2, 7, 9, 5, 3, 2),
        (1, 6, 6, 4, 3, 1),
        (3, 5, 5, 64, 2, 1),
    ):
        # few distinct values, so ties (first maximum wins) are common
        yield f"n{n}h{h}w{w}c{c}k{kernel}s{stride}", (int8(rng, (n, h, w, c), -3, 3), kernel, stride)


def loss_cases(seed: int = 4):
    rng = np.random.default_rng(seed)
    for batch, classes, exponent, low, high in (
        (1, 10, -4, -127, 127),
        (16, 10, -3, -127, 127),
        (8, 100, 0, -127, 127),
        (4, 10, 2, -5, 5),
        (8, 10, -7, -127, 127),
        (8, 10, -12, -127, 127),
        (5, 3, -40, -127, 127),
        (32, 10, -1, -127, 127),
    ):
        logits = int8(rng, (batch, classes), low, high)
        labels = rng.integers(0, classes, size=batch)
        yield f"b{batch}c{classes}e{exponent}", (logits, exponent, labels)


def same(got, want) -> None:
    """Bit-identical: same dtype, shape and every element."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)
