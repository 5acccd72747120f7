"""NITI's batch norm fused with its casts (cpu_ops/bn_cast.cpp, hooks bn_act_s8 and
bn_act_bwd_s8) against the judge, base.py's composition of the float hooks it replaces
(dequantize, bn_fwd_f32, relu_f32 / act_f32, absmax_f, quantize_f; backward dequantize,
relu_bwd_f32 / act_bwd_f32, bn_bwd_f32, absmax_f, quantize_f): on ops_ref bit for bit but
the running statistics (ops_ref's NumPy updates them in another precision, as with the
unfused ops), and bit for bit with everything on the cpu backend's own float hooks. Shapes
ragged and random; the channel counts cover the AVX2 lanes' tails, the row counts both the
per-channel tables (>= 1024 rows) and the direct path."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.backends.base import Backend
from dsptrain.numerics import QTensor, RngKey

SHAPES = [(64, 16, 16, 8), (5, 20, 13, 7), (3, 5, 7, 33), (1, 1, 1, 1), (2, 9, 1, 5), (16, 1, 1, 96)]
ACTS = [("none",), ("relu",), ("clip", 0.0, 6.0), ("clip", -0.5, 1.25)]
MODES = ["round", "nearest_even", "sto"]


@pytest.fixture(scope="module")
def cpu():
    pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    from dsptrain.backends.ops_cpu import CpuBackend

    return CpuBackend()


def _layer(rng, shape):
    """A batch norm's int8 input, gamma and beta (some channels of either sign, one zero),
    running statistics, and an int8 error."""
    c = shape[-1]
    x = QTensor(rng.integers(-127, 128, shape).astype(np.int8), int(rng.integers(-9, 2)))
    gamma = (rng.standard_normal(c) * 2).astype(np.float32)
    gamma[0] = 0.0 if c > 2 else gamma[0]
    beta = rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
    err = QTensor(rng.integers(-127, 128, shape).astype(np.int8), int(rng.integers(-14, -4)))
    return x, gamma, beta, mean, var, err


def _same_q(a, b):
    return a.e == b.e and a.q.dtype == b.q.dtype and np.array_equal(a.q, b.q)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("act", ACTS)
def test_fused_equals_the_chain(cpu, ref, shape, act):
    """Forward (int8 output, its exponent, the saved statistics, running statistics) and
    backward (int8 input error, gamma and beta gradients) of the native op against the
    chain composed on ops_ref and on the cpu backend's own float hooks."""
    rng = np.random.default_rng([SHAPES.index(shape), ACTS.index(act)])
    for mode in MODES:
        for training in (True, False):
            x, gamma, beta, mean, var, err = _layer(rng, shape)
            key = RngKey(7, 3, 11, 5)
            args = (x, gamma, beta, mean, var, training, 0.1, 1e-5, act, mode, key)
            got = cpu.bn_act_s8(*args)
            for judge in (ref, cpu):
                want = Backend.bn_act_s8(judge, *args)
                assert _same_q(got[0], want[0]), (judge.name, mode, training)
                np.testing.assert_array_equal(got[1], want[1])  # float64 mean and 1/std
                if judge is cpu or not training:
                    np.testing.assert_array_equal(got[2], want[2])
                    np.testing.assert_array_equal(got[3], want[3])
                else:
                    np.testing.assert_allclose(got[2], want[2], rtol=1e-6, atol=1e-7)
                    np.testing.assert_allclose(got[3], want[3], rtol=1e-6, atol=1e-7)
            stats = got[1]
            back = cpu.bn_act_bwd_s8(err, x, stats, gamma, beta, act, mode, key)
            for judge in (ref, cpu):
                want = Backend.bn_act_bwd_s8(judge, err, x, stats, gamma, beta, act, mode, key)
                assert _same_q(back[0], want[0]), (judge.name, mode, training)
                np.testing.assert_array_equal(back[1], want[1])
                np.testing.assert_array_equal(back[2], want[2])
            only = cpu.bn_act_bwd_s8(err, x, stats, gamma, beta, act, mode, key, input_error=False)
            assert only[0] is None
            np.testing.assert_array_equal(only[1], back[1])
            np.testing.assert_array_equal(only[2], back[2])


def test_the_output_uses_its_range(cpu):
    """NITI's cast: the largest |output| lands in [64, 127] (exponent ceil(log2 max) - 7)."""
    rng = np.random.default_rng(3)
    x, gamma, beta, mean, var, _ = _layer(rng, (8, 6, 6, 12))
    y = cpu.bn_act_s8(x, gamma, beta, mean, var, True, 0.1, 1e-5, ("clip", 0.0, 6.0), "round", None)[0]
    assert 64 <= np.abs(y.q.astype(np.int32)).max() <= 127
    assert y.q.min() >= 0  # ReLU6


def test_bad_arguments_name_the_op(cpu):
    native = pytest.importorskip("dsptrain._cpu_ops")
    x = np.zeros((2, 3), np.int8)
    ones = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="bn_act_s8: activation 'gelu'"):
        native.bn_act_s8(x, 0, ones, ones, ones, ones, True, 0.1, 1e-5, "gelu", (0.0, 0.0), "round", None)
    with pytest.raises(ValueError, match="bn_act_s8: gamma"):
        native.bn_act_s8(x, 0, np.ones(4, np.float32), ones, ones, ones, True, 0.1, 1e-5, "none", (0, 0), "round", None)
    with pytest.raises(ValueError, match="stochastic rounding needs an RngKey"):
        native.bn_act_s8(x, 0, ones, ones, ones, ones, True, 0.1, 1e-5, "none", (0.0, 0.0), "sto", None)
    with pytest.raises(ValueError, match="bn_act_bwd_s8: stats"):
        native.bn_act_bwd_s8(x, 0, x, 0, np.zeros((2, 4)), ones, ones, "none", (0.0, 0.0), "round", None)
