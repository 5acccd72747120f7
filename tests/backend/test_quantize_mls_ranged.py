"""quantize_mls_ranged (MLS's range and elements in one hook call) of every backend that
claims it, bit-exact against ops_ref (float_ops.quantize_mls_ranged), and the same as the
two hooks it replaces (absmax_f, then quantize_mls with the tensor scale max|x| / qmax)."""

from __future__ import annotations

import numpy as np
import pytest

from .test_float_recipe_ops import BACKENDS, floats, key


@pytest.fixture(params=BACKENDS)
def be(request, make_backend):
    backend = make_backend(request.param)
    assert "quantize_mls_ranged" in backend.hooks, f"{backend.name} lacks quantize_mls_ranged"
    return backend


# LeNet-5's tensors (batch 64: conv1's input, conv2's, fc errors) and ragged ones: groups that
# are not a power of two, rows that cut the native loop's 2**15-element chunks, kmax past 7
CASES = [
    ((64, 28, 28, 1), 1, 3, 127),
    ((64, 12, 12, 6), 2, 3, 127),
    ((64, 120), 8, 3, 127),
    ((3, 5, 6), 2, 0, 127),
    ((5461, 12), 12, 3, 127),
    ((11000, 6), 3, 2, 127),
    ((7, 33), 11, 12, 7),
    ((1,), 1, 3, 127),
]


@pytest.mark.parametrize("shape,group,kmax,qmax", CASES)
@pytest.mark.parametrize("mode", ["round", "nearest_even", "sto"])
def test_quantize_mls_ranged_matches_ref(be, ref, shape, group, kmax, qmax, mode):
    x = floats(np.random.default_rng(group * 13 + kmax), shape)
    x.reshape(-1, group)[1::3] *= 1e-3  # quiet groups take larger k
    got, got_top = be.quantize_mls_ranged(x, group, kmax, qmax, mode, key(kmax))
    want, want_top = ref.quantize_mls_ranged(x, group, kmax, qmax, mode, key(kmax))
    assert got.dtype == np.int16 and got.shape == x.shape
    np.testing.assert_array_equal(got, want)
    assert got_top == want_top == float(np.max(np.abs(x)))
    top = be.absmax_f(x)  # the two calls it replaces
    np.testing.assert_array_equal(got, be.quantize_mls(x, group, top, top / qmax, kmax, qmax, mode, key(kmax)))


@pytest.mark.parametrize("shape", [(4, 16), (0, 8), (64, 0)])
def test_quantize_mls_ranged_all_zero(be, ref, shape):
    x = np.zeros(shape, np.float32)
    if x.size:
        x[0, 1] = -0.0
    for backend in (be, ref):
        q, top = backend.quantize_mls_ranged(x, 4 if shape[-1] else 1, 3, 127, "sto", key(1))
        assert top == 0.0 and q.dtype == np.int16 and q.shape == shape and not q.any()


def test_quantize_mls_ranged_rejects_bad_group(be):
    with pytest.raises(ValueError, match="group 4 does not divide 6 channels"):
        be.quantize_mls_ranged(np.ones((2, 6), np.float32), 4, 3, 127, "round", None)
