"""Float 2x2 max-pool, stride 2, and its backward (cpu_ops/pool_f32_pairs.cpp: a vector's
pixels' windows picked out by permutes, 1-16 channels) against ops_ref, bit for bit: every
channel count, ragged widths (a row's last vector part full), ties and signed zeros (the
first maximum wins, its bits kept), and the shapes it leaves to pool.cpp (odd sizes, more
channels, other windows).
"""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import float_pool_input as pool_input


@pytest.mark.parametrize("channels", range(1, 18))
@pytest.mark.parametrize("hw", [(2, 2), (4, 6), (28, 28), (10, 34), (3, 5), (7, 8)])
def test_maxpool_f32_two_by_two(host_be, ref, channels, hw):
    rng = np.random.default_rng(channels * 100 + hw[1])
    x = pool_input(rng, (3, *hw, channels))
    y, argmax = host_be.maxpool_f32(x, 2, 2)
    want_y, want_argmax = ref.maxpool_f32(x, 2, 2)
    np.testing.assert_array_equal(y.view(np.uint32), want_y.view(np.uint32))
    np.testing.assert_array_equal(argmax, want_argmax)
    err = rng.standard_normal(y.shape).astype(np.float32)
    err[rng.random(y.shape) < 0.2] = -0.0
    dx = host_be.maxpool_bwd_f32(err, argmax, 2, 2, hw)
    np.testing.assert_array_equal(dx.view(np.uint32), ref.maxpool_bwd_f32(err, want_argmax, 2, 2, hw).view(np.uint32))


@pytest.mark.parametrize("kernel,stride", [(3, 2), (2, 1), (3, 3)])
def test_other_windows_unchanged(host_be, ref, kernel, stride):
    x = pool_input(np.random.default_rng(kernel * 10 + stride), (2, 9, 11, 6))
    y, argmax = host_be.maxpool_f32(x, kernel, stride)
    want_y, want_argmax = ref.maxpool_f32(x, kernel, stride)
    np.testing.assert_array_equal(y.view(np.uint32), want_y.view(np.uint32))
    np.testing.assert_array_equal(argmax, want_argmax)
