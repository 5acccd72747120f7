"""The device DSP transport: FastRPC to the cDSP of a Snapdragon phone (see docs/phone.md).

The arena is an rpcmem (ION/dma-buf) buffer mapped into the DSP process once with
fastrpc_mmap, so a batch is one remote_handle64_invoke carrying three integers: the
arena's fd and a span of ring slots. The skel (dsp_kernels/skel.c, built by
`make -C dsp_kernels device`) runs the same kernels as the emulated server.
Method numbering follows qaic for a remote_handle64 interface: 0 open, 1 close,
then the methods of dsp_kernels/iface.idl in order (dsp_kernels/fastrpc_abi.h).

FastRPC has no per-call timeout: each invoke runs on a worker thread and a call that
does not return within the timeout (DSPTRAIN_DSP_TIMEOUT) closes the session and raises
BackendError; the next batch opens a new one. DSPTRAIN_CDSPRPC names the library to
load (default: libcdsprpc.so, then libadsprpc.so, on the loader's path); the tests
point it at a stand-in that forwards to the emulated server (tests/backend/fastrpc_stub).
"""

from __future__ import annotations

import ctypes
import os
import threading

from ..errors import BackendError
from . import dsp_abi
from .dsp_arena import Arena

CDSP_DOMAIN_ID = 3
RPCMEM_HEAP_ID_SYSTEM = 25
RPCMEM_DEFAULT_FLAGS = 1
DSPRPC_CONTROL_UNSIGNED_MODULE = 7
FASTRPC_MAP_FD = 2
SKEL_URI = b"file:///libdsptrain_skel.so?dsptrain_skel_handle_invoke&_modver=1.0&_dom=cdsp"
METHOD_HELLO, METHOD_RUN = 2, 3  # iface.idl: hello(), run()
LIBRARIES = ("libcdsprpc.so", "libadsprpc.so")


class _RemoteBuf(ctypes.Structure):
    _fields_ = [("pv", ctypes.c_void_p), ("nLen", ctypes.c_size_t)]


class _RemoteArg(ctypes.Union):
    _fields_ = [("buf", _RemoteBuf), ("h", ctypes.c_uint32), ("h64", ctypes.c_uint64)]


class _UnsignedPd(ctypes.Structure):
    _fields_ = [("domain", ctypes.c_int), ("enable", ctypes.c_int)]


def _scalars(method: int, n_in: int, n_out: int) -> int:
    """REMOTE_SCALARS_MAKE from remote.h."""
    return ((method & 0x1F) << 24) | ((n_in & 0xFF) << 16) | ((n_out & 0xFF) << 8)


def _load():
    explicit = os.environ.get("DSPTRAIN_CDSPRPC")
    for name in (explicit,) if explicit else LIBRARIES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class FastRpcTransport:
    name = "fastrpc"

    @staticmethod
    def available() -> tuple[bool, str]:
        lib = _load()
        name = os.environ.get("DSPTRAIN_CDSPRPC") or "libcdsprpc.so"
        if lib is None:
            return False, f"no device: {name} not found (not an Android/Snapdragon system)"
        return True, f"fastrpc: {name} loaded (skel found at first call via ADSP_LIBRARY_PATH)"

    def __init__(self, arena_bytes: int, timeout: float):
        self.timeout = timeout  # per invoke, enforced by a worker thread (_invoke)
        self.restarts = 0
        self._lib = _load()
        if self._lib is None:
            raise BackendError("dsp", "no device: libcdsprpc.so not found")
        lib = self._lib
        lib.rpcmem_alloc.restype = ctypes.c_void_p
        lib.rpcmem_alloc.argtypes = [ctypes.c_int, ctypes.c_uint32, ctypes.c_int]
        lib.rpcmem_to_fd.argtypes = [ctypes.c_void_p]
        lib.rpcmem_free.argtypes = [ctypes.c_void_p]
        self._ptr = lib.rpcmem_alloc(RPCMEM_HEAP_ID_SYSTEM, RPCMEM_DEFAULT_FLAGS, arena_bytes)
        if not self._ptr:
            raise BackendError("dsp", f"rpcmem_alloc of {arena_bytes} bytes failed")
        self._fd = lib.rpcmem_to_fd(ctypes.c_void_p(self._ptr))
        buf = (ctypes.c_uint8 * arena_bytes).from_address(self._ptr)
        self.arena = Arena(buf, arena_bytes)
        self._ring = (dsp_abi.OpDesc * dsp_abi.RING_SLOTS).from_address(self._ptr + dsp_abi.RING_OFFSET)
        self._handle = None
        self.op_mask = 0

    @property
    def alive(self) -> bool:
        return self._handle is not None

    def start(self) -> None:
        if self._handle is not None:
            return
        lib = self._lib
        pd = _UnsignedPd(CDSP_DOMAIN_ID, 1)  # unsigned PD: no signing of the skel needed
        rc = lib.remote_session_control(DSPRPC_CONTROL_UNSIGNED_MODULE, ctypes.byref(pd), ctypes.sizeof(pd))
        if rc:
            raise BackendError("dsp", f"remote_session_control(UNSIGNED_MODULE) failed: {rc:#x}")
        handle = ctypes.c_uint64()
        rc = lib.remote_handle64_open(SKEL_URI, ctypes.byref(handle))
        if rc:
            raise BackendError(
                "dsp",
                f"remote_handle64_open({SKEL_URI.decode()}) failed: {rc:#x}; "
                "is libdsptrain_skel.so on ADSP_LIBRARY_PATH?",
            )
        self._handle = handle.value
        rc = lib.fastrpc_mmap(
            CDSP_DOMAIN_ID, self._fd, ctypes.c_void_p(self._ptr), 0, ctypes.c_size_t(self.arena.nbytes), FASTRPC_MAP_FD
        )
        if rc:
            self.kill()
            raise BackendError("dsp", f"fastrpc_mmap of the arena failed: {rc:#x}")
        hello = dsp_abi.Hello()
        self._invoke(METHOD_HELLO, (ctypes.c_int32 * 2)(self._fd, self.arena.nbytes), hello)
        try:
            dsp_abi.check_hello(hello)
        except ValueError as exc:
            self.kill()
            raise BackendError("dsp", f"skel: {exc}") from None
        self.op_mask = hello.op_mask

    def _invoke(self, method: int, primitives_in, out) -> None:
        args = (_RemoteArg * 2)()
        args[0].buf = _RemoteBuf(ctypes.cast(primitives_in, ctypes.c_void_p), ctypes.sizeof(primitives_in))
        args[1].buf = _RemoteBuf(ctypes.cast(ctypes.pointer(out), ctypes.c_void_p), ctypes.sizeof(out))
        done, box = threading.Event(), {}

        def call():  # ctypes releases the GIL for the call
            box["rc"] = self._lib.remote_handle64_invoke(ctypes.c_uint64(self._handle), _scalars(method, 1, 1), args)
            done.set()

        worker = threading.Thread(target=call, name="dsptrain-fastrpc", daemon=True)
        worker.start()
        if not done.wait(self.timeout):
            self.kill()
            self.restarts += 1
            raise BackendError(
                "dsp",
                f"remote_handle64_invoke(method {method}) did not return within "
                f"{self.timeout:g} s (DSPTRAIN_DSP_TIMEOUT); closed the session",
            )
        rc = box["rc"]
        if rc:
            self.kill()
            self.restarts += 1
            raise BackendError("dsp", f"remote_handle64_invoke(method {method}) failed: {rc:#x}")

    def run(self, descs: list) -> None:
        self.start()
        for first in range(0, len(descs), dsp_abi.RING_SLOTS):
            chunk = descs[first : first + dsp_abi.RING_SLOTS]
            for i, d in enumerate(chunk):
                d.status = -1
                ctypes.pointer(self._ring[i])[0] = d
            reply = dsp_abi.Reply()
            self._invoke(METHOD_RUN, (ctypes.c_int32 * 3)(self._fd, 0, len(chunk)), reply)
            for i, d in enumerate(chunk):
                ctypes.memmove(ctypes.addressof(d), ctypes.addressof(self._ring[i]), ctypes.sizeof(dsp_abi.OpDesc))
            if reply.status != dsp_abi.OK:
                return

    def kill(self) -> None:
        if self._handle is not None:
            self._lib.fastrpc_munmap(CDSP_DOMAIN_ID, self._fd, None, ctypes.c_size_t(self.arena.nbytes))
            self._lib.remote_handle64_close(ctypes.c_uint64(self._handle))
            self._handle = None

    def close(self) -> None:
        self.kill()
        # The rpcmem buffer is left to the process exit: arrays exported from the arena
        # may outlive the backend, and freeing it under them would corrupt them.
