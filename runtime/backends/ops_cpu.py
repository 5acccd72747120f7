"""The native CPU backend: int8 kernels in C++ (`cpu_ops/`, built as `dsptrain._cpu_ops`).

GEMMs run on the fastest int8 instructions the CPU has (AMX-INT8 tiles, AVX-512 VNNI,
AVX-VNNI, AVX2, NEON dotprod, or portable C++), picked at run time; the environment
variable DSPTRAIN_CPU_ISA=amx|avx512vnni|avxvnni|avx2|neon|scalar forces one (a debug
knob: an ISA the CPU lacks is an error). On `amx` the few-channel convolution kernels and
GEMMs shorter than 33 in K run on AVX-512 VNNI, where they are faster. Every hook is bit-exact with `ops_ref`, stochastic
rounding included (the same Threefry counter RNG, in `cpu_ops/threefry.h`).
"""
from __future__ import annotations

import os

import numpy as np

from ..numerics import RngKey
from .base import Backend

try:
    from .. import _cpu_ops as _native
    _IMPORT_ERROR = None
except ImportError as exc:  # the extension was not built: the backend says so, nothing crashes
    _native = None
    _IMPORT_ERROR = exc

ISA_ENV = "DSPTRAIN_CPU_ISA"
_U32 = 0xFFFFFFFF


def _rng(rng: RngKey | None):
    if rng is None:
        return None
    return (rng.seed & _U32, rng.step & _U32, rng.tensor_id & _U32, rng.offset & _U32)


def _shift(shift: int | None) -> int:
    return -1 if shift is None else int(shift)


class CpuBackend(Backend):
    name = "cpu"
    hooks = frozenset({
        "gemm_s8", "conv2d_s8", "conv2d_bwd_data_s8", "conv2d_bwd_weight_s8",
        "absmax", "shift_round", "requantize",
        "conv2d_requant_s8", "gemm_requant_s8", "conv2d_bwd_data_requant_s8",
        "relu_s8", "relu_bwd_s8", "maxpool_s8", "maxpool_bwd_s8",
        "niti_loss_grad_s8", "niti_update_s8",
    })
    blocks_for_cache = True   # cpu_ops/gemm_driver.cpp: Goto-style blocking (A blocks in L2, B panels in L1)

    def __init__(self):
        if _native is None:
            raise RuntimeError(f"cpu backend: native extension not importable: {_IMPORT_ERROR}")
        forced = os.environ.get(ISA_ENV)
        _native.set_isa(forced if forced else _native.supported_isas()[0])
        self.isa = _native.isa()

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if _native is None:
            return False, f"native extension not built or not importable ({_IMPORT_ERROR})"
        forced = os.environ.get(ISA_ENV)
        if forced and forced not in _native.supported_isas():
            return False, f"{ISA_ENV}={forced} but this CPU/build supports {', '.join(_native.supported_isas())}"
        isa = forced or _native.supported_isas()[0]
        return True, f"native int8 kernels ({isa}, {_native.threads()} threads)"

    def release_scratch(self):
        """Free the native kernels' kept scratch, of every thread (cpu_ops/scratch.h)."""
        return int(_native.release_scratch())

    def scratch_bytes(self, graph, op, rows):
        """The native kernels' grow-only scratch for `op` on `rows` rows, by buffer; the
        sizes come from cpu_ops/scratch.cpp (beside the kernels), not from here. The op's
        declared product (graph.Product) says which kernel runs and where its operands are."""
        product = op.product
        if product is None:
            return {}
        requant = op.is_requant()
        shape = [graph.tensors[t].shape for t in (*op.inputs, *op.outputs)]
        if product.layer == "conv":    # x: (N, H, W, C), w: (O, KH, KW, C)
            x, w = {"forward": (shape[0], shape[1]), "backward_data": (shape[2], shape[1]),
                    "backward_weight": (shape[1], shape[2])}[product.pass_]
            sizes = [rows, *x[1:], *w[:3], op.attrs["stride"], op.attrs["pad"]]
            return dict(_native.scratch_bytes(product.pass_, sizes, requant))
        if product.pass_ != "backward_weight":             # a[rows, K] @ b[N, K].T
            w = shape[1]
            n, k = (w[0], w[1]) if product.pass_ == "forward" else (w[1], w[0])
            return dict(_native.scratch_bytes("gemm", [rows, n, k], requant))
        o, i = int(np.prod(shape[0][1:])), int(np.prod(shape[1][1:]))   # err.T[O, rows] @ x.T[I, rows].T
        return dict(_native.scratch_bytes("gemm", [o, i, rows], requant))

    # ------------------------------------------------------------ int8 products
    def gemm_s8(self, a, b):
        return _native.gemm_s8(a, b)

    def conv2d_s8(self, x, w, stride, pad):
        return _native.conv2d_s8(x, w, stride, pad)

    def conv2d_bwd_data_s8(self, err, w, stride, pad, in_hw):
        return _native.conv2d_bwd_data_s8(err, w, stride, pad, tuple(in_hw))

    def conv2d_bwd_weight_s8(self, err, x, stride, pad, kernel):
        return _native.conv2d_bwd_weight_s8(err, x, stride, pad, tuple(kernel))

    # ------------------------------------------------------------ epilogue
    def absmax(self, acc):
        return int(_native.absmax(acc))

    def shift_round(self, acc, shift, mode, rng):
        return _native.shift_round(acc, max(int(shift), 0), mode, _rng(rng))

    def requantize(self, acc, mode, rng, shift=None, bits=8):
        return _native.requantize(acc, _shift(shift), bits, mode, _rng(rng))

    def conv2d_requant_s8(self, x, w, stride, pad, mode, rng, shift=None):
        return _native.conv2d_requant_s8(x, w, stride, pad, _shift(shift), mode, _rng(rng))

    def gemm_requant_s8(self, a, b, mode, rng, shift=None):
        return _native.gemm_requant_s8(a, b, _shift(shift), mode, _rng(rng))

    def conv2d_bwd_data_requant_s8(self, err, w, stride, pad, in_hw, mode, rng, shift=None):
        return _native.conv2d_bwd_data_requant_s8(err, w, stride, pad, tuple(in_hw), _shift(shift), mode, _rng(rng))

    # ------------------------------------------------------------ element-wise
    def relu_s8(self, x):
        return _native.relu_s8(x)

    def relu_bwd_s8(self, err, y):
        return _native.relu_bwd_s8(err, y)

    def maxpool_s8(self, x, kernel, stride):
        return _native.maxpool_s8(x, kernel, stride)

    def maxpool_bwd_s8(self, err, argmax, kernel, stride, in_hw):
        return _native.maxpool_bwd_s8(err, argmax, kernel, stride, tuple(in_hw))

    # ------------------------------------------------------------ NITI loss and update
    def niti_loss_grad_s8(self, logits, exponent, labels, rng):
        return _native.niti_loss_grad_s8(np.asarray(logits), int(exponent), np.asarray(labels), _rng(rng))

    def niti_update_s8(self, w, grad, mu, mode, rng):
        return _native.niti_update_s8(w, grad, int(mu), mode, _rng(rng))
