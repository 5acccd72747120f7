"""Every hook of every available backend against ops_ref, bit for bit.

Runs once per backend that is usable here (cpu; dsp when it is built). A hook a backend
does not list in `hooks` falls back to the base-class composition, which must match too.
"""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.errors import NoSupport

from . import cases
from .conftest import available_backends

BACKENDS = available_backends()


class _Declining:
    """Wraps a backend so that a hook answering NoSupport (the backend declines those
    parameters, and placement would run the op on ref), or a required hook the backend
    does not claim in `hooks`, skips the test and says why."""

    def __init__(self, backend):
        self._backend = backend

    def __getattr__(self, hook):
        fn = getattr(self._backend, hook)
        if not callable(fn):
            return fn

        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except NoSupport as exc:
                pytest.skip(f"{self._backend.name} declines {hook}: {exc}")
            except NotImplementedError as exc:
                if hook in self._backend.hooks:
                    raise  # it claims the hook: not implementing it is a bug
                pytest.skip(f"{self._backend.name} does not list {hook} in its hooks ({exc})")

        return call


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request, make_backend):
    b = make_backend(request.param)
    yield _Declining(b)
    b.close()


def equal(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", list(cases.gemm_cases()), ids=lambda c: c[0])
def test_gemm_s8(backend, ref, case):
    a, b = case[1]
    equal(backend.gemm_s8(a, b), ref.gemm_s8(a, b))


@pytest.mark.parametrize("case", list(cases.gemm_extreme_cases()), ids=lambda c: c[0])
def test_gemm_s8_extremes(backend, ref, case):
    a, b = case[1]
    equal(backend.gemm_s8(a, b), ref.gemm_s8(a, b))


def test_gemm_s8_int64_accumulator(backend, ref):
    k = 140_000  # k * 127 * 127 >= 2**31: the contract says int64
    rng = np.random.default_rng(5)
    a = np.full((3, k), 127, np.int8)
    a[1] = cases.int8(rng, k)
    b = np.full((2, k), 127, np.int8)
    b[0] = -128
    got = backend.gemm_s8(a, b)
    assert got.dtype == np.int64
    equal(got, ref.gemm_s8(a, b))


@pytest.mark.parametrize("case", list(cases.conv_cases()), ids=lambda c: c[0])
def test_convolutions(backend, ref, case):
    c = case[1]
    x, w, err, stride, pad = c["x"], c["w"], c["err"], c["stride"], c["pad"]
    in_hw = x.shape[1:3]
    equal(backend.conv2d_s8(x, w, stride, pad), ref.conv2d_s8(x, w, stride, pad))
    equal(backend.conv2d_bwd_data_s8(err, w, stride, pad, in_hw), ref.conv2d_bwd_data_s8(err, w, stride, pad, in_hw))
    equal(
        backend.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
        ref.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
    )


@pytest.mark.parametrize("mode", cases.ROUNDING)
@pytest.mark.parametrize("case", list(cases.conv_cases())[1:4], ids=lambda c: c[0])
def test_fused_requant(backend, ref, case, mode):
    c = case[1]
    x, w, err, stride, pad = c["x"], c["w"], c["err"], c["stride"], c["pad"]
    key = cases.rng_key(len(case[0]))
    for shift in (None, 0, 3, 9):
        got = backend.conv2d_requant_s8(x, w, stride, pad, mode, key, shift)
        want = ref.conv2d_requant_s8(x, w, stride, pad, mode, key, shift)
        equal(got[0], want[0])
        assert got[1] == want[1]
        got = backend.conv2d_bwd_data_requant_s8(err, w, stride, pad, x.shape[1:3], mode, key, shift)
        want = ref.conv2d_bwd_data_requant_s8(err, w, stride, pad, x.shape[1:3], mode, key, shift)
        equal(got[0], want[0])
        assert got[1] == want[1]
        a, b = x.reshape(-1, x.shape[-1]), w.reshape(w.shape[0], -1)[:, : x.shape[-1]].copy()
        got, want = backend.gemm_requant_s8(a, b, mode, key, shift), ref.gemm_requant_s8(a, b, mode, key, shift)
        equal(got[0], want[0])
        assert got[1] == want[1]


@pytest.mark.parametrize("case", list(cases.acc_cases()), ids=lambda c: c[0])
def test_epilogue(backend, ref, case):
    acc = case[1]
    assert backend.absmax(acc) == ref.absmax(acc)
    for i, mode in enumerate(cases.ROUNDING):
        key = cases.rng_key(i)
        for shift in (0, 1, 2, 5, 8, 17, 31, 33, 40):
            equal(backend.shift_round(acc, shift, mode, key), ref.shift_round(acc, shift, mode, key))
        for bits in (8, 4):
            got, want = backend.requantize(acc, mode, key, None, bits), ref.requantize(acc, mode, key, None, bits)
            equal(got[0], want[0])
            assert got[1] == want[1]


@pytest.mark.parametrize("case", list(cases.pool_cases()), ids=lambda c: c[0])
def test_relu_and_pool(backend, ref, case):
    x, kernel, stride = case[1]
    equal(backend.relu_s8(x), ref.relu_s8(x))
    y = ref.relu_s8(x)
    err = cases.int8(np.random.default_rng(9), x.shape)
    equal(backend.relu_bwd_s8(err, y), ref.relu_bwd_s8(err, y))
    got_y, got_idx = backend.maxpool_s8(x, kernel, stride)
    want_y, want_idx = ref.maxpool_s8(x, kernel, stride)
    equal(got_y, want_y)
    equal(got_idx, want_idx)
    perr = cases.int8(np.random.default_rng(10), want_y.shape)
    equal(
        backend.maxpool_bwd_s8(perr, want_idx, kernel, stride, x.shape[1:3]),
        ref.maxpool_bwd_s8(perr, want_idx, kernel, stride, x.shape[1:3]),
    )


def test_maxpool_bwd_saturates(backend, ref):
    # overlapping windows (stride 1) that all pick the same cell add past 127, then clip
    x = np.zeros((1, 4, 4, 2), np.int8)
    x[0, 1, 1] = 100
    _, idx = ref.maxpool_s8(x, 3, 1)
    err = np.full((1, 2, 2, 2), 100, np.int8)
    err[..., 1] = -128
    want = ref.maxpool_bwd_s8(err, idx, 3, 1, (4, 4))
    assert want.max() == 127 and want.min() == -127
    equal(backend.maxpool_bwd_s8(err, idx, 3, 1, (4, 4)), want)


@pytest.mark.parametrize("case", list(cases.loss_cases()), ids=lambda c: c[0])
def test_niti_loss_grad(backend, ref, case):
    logits, exponent, labels = case[1]
    key = cases.rng_key(exponent + 50)
    equal(
        backend.niti_loss_grad_s8(logits, exponent, labels, key), ref.niti_loss_grad_s8(logits, exponent, labels, key)
    )
    wide = logits.astype(np.int32) * 300
    equal(backend.niti_loss_grad_s8(wide, exponent, labels, key), ref.niti_loss_grad_s8(wide, exponent, labels, key))


@pytest.mark.parametrize("mode", cases.ROUNDING)
@pytest.mark.parametrize("mu", (1, 3, 8))
def test_niti_update(backend, ref, mode, mu):
    rng = np.random.default_rng(mu)
    w = cases.int8(rng, (17, 3, 3, 5), -127, 127)
    key = cases.rng_key(mu)
    for grad in (
        rng.integers(-(2**20), 2**20, w.shape, dtype=np.int32),
        rng.integers(-3, 4, w.shape).astype(np.int64),
        np.zeros(w.shape, np.int32),
    ):
        equal(backend.niti_update_s8(w, grad, mu, mode, key), ref.niti_update_s8(w, grad, mu, mode, key))
