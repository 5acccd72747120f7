"""A DSP that dies, hangs or refuses raises BackendError / NoSupport, and the next call
restarts it; arrays resident in the arena survive the restart."""

import os
import signal
import threading
import time

import numpy as np
import pytest
from dsptrain.backends import dsp_abi
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.errors import BackendError, NoSupport

ref = RefBackend()


@pytest.fixture
def dsp(emulated_dsp_tools):
    from dsptrain.backends.ops_dsp import DspBackend

    backend = DspBackend(transport="emulated", timeout=2.0)
    yield backend
    backend.close()


def gemm_ok(dsp):
    rng = np.random.default_rng(7)  # the same small product every call
    a, b = rng.integers(-127, 128, (5, 9), dtype=np.int8), rng.integers(-127, 128, (4, 9), dtype=np.int8)
    np.testing.assert_array_equal(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))


def server_pid(dsp):
    return dsp.transport._proc.pid


def test_crash_then_restart(dsp):
    gemm_ok(dsp)
    with pytest.raises(BackendError, match="died"):
        dsp.debug_crash()
    gemm_ok(dsp)
    assert dsp.transport.restarts == 1


def test_killed_mid_batch(dsp):
    gemm_ok(dsp)
    pid = server_pid(dsp)
    killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(BackendError, match="died"):
        dsp.debug_sleep(1500)  # timeout is 2 s: the kill, not the timeout, ends it
    assert time.monotonic() - t0 < 1.5
    killer.join()
    gemm_ok(dsp)
    assert server_pid(dsp) != pid


def test_hung_server_times_out(dsp):
    gemm_ok(dsp)
    t0 = time.monotonic()
    with pytest.raises(BackendError, match="did not answer"):
        dsp.debug_sleep(10_000)
    assert time.monotonic() - t0 < 5
    gemm_ok(dsp)


def test_stopped_server_times_out(dsp):
    gemm_ok(dsp)
    os.kill(server_pid(dsp), signal.SIGSTOP)
    with pytest.raises(BackendError, match="did not answer"):
        gemm_ok(dsp)
    gemm_ok(dsp)


def test_no_support_status(dsp):
    with pytest.raises(NoSupport):
        dsp._run([dsp._desc(dsp_abi.OP_COUNT + 3, dsp_abi.I8)])
    with pytest.raises(NoSupport):  # int64 accumulators stay off the DSP
        dsp.absmax(np.ones(4, np.int64))
    gemm_ok(dsp)


def test_bad_params_status(dsp):
    d = dsp._desc(dsp_abi.OP_RELU_S8, dsp_abi.I8, (dsp.transport.arena.nbytes - 4,), (0,), a=(64,))
    with pytest.raises(BackendError, match="BAD_PARAMS"):
        dsp._run([d])
    gemm_ok(dsp)


def test_resident_weights_survive_restart(dsp, rng):
    w = rng.integers(-127, 128, (6, 5, 5, 1), dtype=np.int8)
    g = rng.integers(-(2**15), 2**15, w.shape, dtype=np.int32)
    w1 = dsp.niti_update_s8(w, g, 3, "psto", None)  # lives in the arena now
    want = ref.niti_update_s8(ref.niti_update_s8(w, g, 3, "psto", None), g, 3, "psto", None)
    with pytest.raises(BackendError):
        dsp.debug_crash()
    before = dsp.bytes_in
    np.testing.assert_array_equal(dsp.niti_update_s8(w1, g, 3, "psto", None), want)
    assert dsp.bytes_in - before == g.nbytes  # w1 was not copied again
