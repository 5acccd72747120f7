"""MLS's quantizer on the cpu backend's sixteen-lane path (cpu_ops/quant_mls.cpp) against
ops_ref, bit for bit: the group sizes it takes (1, 2, 4, 8, 16), error tensors that are
mostly exact zeros (stochastic rounding draws words for the others only), elements placed
on and next to rounding boundaries (the lanes it redoes in double), ragged lengths that
end inside a vector, a 1,024-element block and a 32,768-element chunk, and the inputs it
hands to the general loop (a top that is not a float32 value, kmax beyond 7)."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.numerics import RngKey

pytestmark = pytest.mark.usefixtures("ref")


@pytest.fixture(scope="module")
def cpu(make_backend):
    return make_backend("cpu")


def _key(i: int) -> RngKey:
    return RngKey(seed=11 + i, step=4 * i + 1, tensor_id=3 + i, offset=7 * i)


def _errors(rng, size: int, zeros: float) -> np.ndarray:
    """Backward errors after ReLU and max-pool: most exact zeros, the rest over many binades,
    a few -0.0."""
    x = rng.normal(size=size) * np.exp(rng.uniform(-8, 1, size=size))
    x[rng.random(size) < zeros] = 0.0
    x[rng.random(size) < 0.01] = -0.0
    return x.astype(np.float32)


def _args(x, group, kmax, qmax, mode, i, ref):
    top = ref.absmax_f(x)
    return (x, group, top, top / qmax, kmax, qmax, mode, _key(i))


@pytest.mark.parametrize("group", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("mode", ["round", "nearest_even", "sto"])
@pytest.mark.parametrize("kmax", [0, 3, 7])
def test_lanes_match_ref(cpu, ref, group, mode, kmax):
    rng = np.random.default_rng(group * 31 + kmax)
    for length in (16 * group, 1024 + 3 * group, 32768 + 1024 + 5 * group, 48 * 13 * group + group):
        x = _errors(rng, length, zeros=0.85 if mode == "sto" else 0.3)
        x.reshape(-1, group)[1::3] *= 2.0 ** -rng.integers(1, 9)  # quiet groups take larger k
        args = _args(x.reshape(-1, group), group, kmax, 127, mode, length, ref)
        got, want = cpu.quantize_mls(*args), ref.quantize_mls(*args)
        assert got.dtype == np.int16
        np.testing.assert_array_equal(got, want, err_msg=f"length {length}")


@pytest.mark.parametrize("mode", ["round", "nearest_even", "sto"])
@pytest.mark.parametrize("qmax", [7, 127, 2047])
def test_boundaries_redone_exactly(cpu, ref, mode, qmax):
    """Elements whose quotient lies on or within a few float32 ulps of a half (nearest) or
    an integer (floor of v + u): the float32 lanes cannot decide them and must redo them."""
    rng = np.random.default_rng(qmax)
    top = np.float32(1.75)
    scale = float(top) / qmax
    whole = rng.integers(-qmax, qmax + 1, size=4096).astype(np.float64)
    near = whole + (0.5 if mode != "sto" else 0.0) + rng.integers(-3, 4, size=4096) * 2.0**-20
    x = (near * scale).astype(np.float32)
    x = np.concatenate(
        [x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, -np.float32(np.inf)), [top, -top]]
    ).astype(np.float32)
    x = np.clip(x, -top, top)
    for group, kmax in ((1, 0), (2, 3), (16, 7 if qmax * 2**7 <= 32767 else 4)):
        v = x[: x.size // group * group].reshape(-1, group)
        args = (v, group, float(top), scale, kmax, qmax, mode, _key(qmax + group))
        np.testing.assert_array_equal(cpu.quantize_mls(*args), ref.quantize_mls(*args))


@pytest.mark.parametrize("mode", ["round", "sto"])
def test_general_loop_inputs(cpu, ref, mode):
    """A top that is no float32 value, a kmax beyond 7, a group of 6, a tensor scale that
    is not top / qmax (elements beyond qmax clip): the same bits either way."""
    rng = np.random.default_rng(5)
    x = _errors(rng, 6 * 700, zeros=0.5).reshape(-1, 6)
    top = ref.absmax_f(x)
    for group, t, scale, kmax, qmax in (
        (2, top * (1 + 2.0**-40), top / 127, 3, 127),
        (2, top, top / 127, 8, 127),
        (6, top, top / 127, 3, 127),
        (2, top, top / 500, 3, 127),
        (2, top, top / 127, 3, 1),
    ):
        args = (x, group, t, scale, kmax, qmax, mode, _key(kmax))
        np.testing.assert_array_equal(cpu.quantize_mls(*args), ref.quantize_mls(*args))


def test_lanes_same_bits_at_any_thread_count(cpu, ref):
    from dsptrain import _cpu_ops

    x = _errors(np.random.default_rng(9), 64 * 28 * 28 * 6, zeros=0.86).reshape(64, 28, 28, 6)
    args = _args(x, 2, 3, 127, "sto", 1, ref)
    before = _cpu_ops.get_threads() if hasattr(_cpu_ops, "get_threads") else None
    try:
        _cpu_ops.set_threads(1)
        one = cpu.quantize_mls(*args)
        _cpu_ops.set_threads(2)
        two = cpu.quantize_mls(*args)
    finally:
        if before is not None:
            _cpu_ops.set_threads(before)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, ref.quantize_mls(*args))
