"""The FastRPC transport (runtime/backends/dsp_fastrpc.py), run against a stand-in
libcdsprpc.so that forwards to the emulated server: kernels bit-exact through it, a hung
call times out and the next batch opens a new session. And the device build: skel.c and
the kernels as a Hexagon shared object (clang-16 -fPIC -shared, lld-16) exporting the
FastRPC entry points, so the skel cannot rot without a phone or the Hexagon SDK."""

import shutil
import struct
import subprocess

import numpy as np
import pytest
from dsptrain.backends import dsp_build
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.errors import BackendError

ref = RefBackend()


def s8(rng, *shape):
    return rng.integers(-127, 128, shape, dtype=np.int8)


@pytest.fixture
def fastrpc(fastrpc_stub, monkeypatch):
    from dsptrain.backends.ops_dsp import DspBackend

    for key, value in fastrpc_stub.items():
        monkeypatch.setenv(key, value)
    backend = DspBackend(transport="fastrpc", timeout=3.0)
    yield backend
    backend.close()


def test_kernels_through_fastrpc_are_bit_exact(fastrpc, rng):
    from dsptrain.backends.dsp_fastrpc import FastRpcTransport

    ok, why = FastRpcTransport.available()
    assert ok and "libcdsprpc.so loaded" in why
    a, b = s8(rng, 37, 70), s8(rng, 45, 70)
    np.testing.assert_array_equal(fastrpc.gemm_s8(a, b), ref.gemm_s8(a, b))
    x, w = s8(rng, 2, 9, 9, 6), s8(rng, 16, 5, 5, 6)
    got, shift = fastrpc.conv2d_requant_s8(x, w, 1, 2, "round", None)
    want, want_shift = ref.conv2d_requant_s8(x, w, 1, 2, "round", None)
    np.testing.assert_array_equal(got, want)
    assert shift == want_shift
    assert fastrpc.transport.name == "fastrpc" and fastrpc.transport.op_mask
    assert all(packets > 0 for _, packets, _, _ in fastrpc.last_costs)


def test_hung_call_times_out_and_the_next_opens_a_new_session(fastrpc, rng):
    fastrpc.gemm_s8(s8(rng, 4, 8), s8(rng, 4, 8))
    with pytest.raises(BackendError, match="did not return within 3 s"):
        fastrpc.debug_sleep(20_000)
    assert not fastrpc.transport.alive and fastrpc.transport.restarts == 1
    a, b = s8(rng, 5, 9), s8(rng, 3, 9)
    np.testing.assert_array_equal(fastrpc.gemm_s8(a, b), ref.gemm_s8(a, b))


def test_skel_builds_as_a_hexagon_shared_object(tmp_path, need_tools):
    need_tools(
        [t for t in ("clang-16", "ld.lld-16", "llvm-readelf-16") if not shutil.which(t)],
        "apt-get install clang-16 lld-16 llvm-16",
    )
    proc = subprocess.run(
        ["make", "-s", "-C", str(dsp_build.kernels_dir()), "skel", f"BUILD={tmp_path}"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    so = tmp_path / "libdsptrain_skel.so"
    head = so.read_bytes()[:20]
    e_type, e_machine = struct.unpack_from("<HH", head, 16)
    assert head[:4] == b"\x7fELF" and e_type == 3 and e_machine == 164  # ET_DYN, EM_QDSP6
    syms = subprocess.run(["llvm-readelf-16", "--dyn-syms", str(so)], capture_output=True, text=True).stdout
    defined = {line.split()[-1] for line in syms.splitlines() if " FUNC " in line and " UND " not in line}
    assert {
        "dsptrain_skel_handle_invoke",
        "dsptrain_open",
        "dsptrain_close",
        "dsptrain_hello",
        "dsptrain_run",
    } <= defined
    undefined = {line.split()[-1] for line in syms.splitlines() if " UND " in line and line.split()[-1] != "UND"}
    # only what the DSP's runtime provides may stay unresolved: FastRPC's HAP, the allocator,
    # and QuRT's threads and futexes (the HVX worker pool, dsp_kernels/threads_qurt.c)
    qurt_threads = {
        "pthread_attr_init",
        "pthread_attr_setstacksize",
        "pthread_attr_destroy",
        "pthread_create",
        "pthread_join",
        "qurt_futex_wait",
        "qurt_futex_wake",
    }
    assert undefined <= {"HAP_mmap_get", "HAP_mmap_put", "calloc", "memalign", "free"} | qurt_threads, undefined
    assert qurt_threads <= undefined  # the pool is linked in: shares run on the DSP's threads
