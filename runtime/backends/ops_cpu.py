"""The native CPU backend: int8 kernels in C++ (`cpu_ops/`, built as `dsptrain._cpu_ops`).

GEMMs run on the fastest int8 instructions the CPU has (AMX-INT8 tiles, AVX-512 VNNI,
AVX-VNNI, AVX2, NEON dotprod, or portable C++), picked at run time; the environment
variable DSPTRAIN_CPU_ISA=amx|avx512vnni|avxvnni|avx2|neon|scalar forces one (a debug
knob: an ISA the CPU lacks is an error). On `amx` the few-channel convolution kernels and
GEMMs shorter than 33 in K run on AVX-512 VNNI, where they are faster. Every hook is bit-exact with `ops_ref`, stochastic
rounding included (the same Threefry counter RNG, in `cpu_ops/threefry.h`), but FP32's
float products (`cpu_ops/gemm_f32.cpp`: an AVX-512 float GEMM of its own, portable loops
elsewhere), which sum in their own fixed order: within float32 rounding of NumPy's BLAS,
and the same at any thread count.
"""

from __future__ import annotations

import os

import numpy as np

from .. import layout
from ..cores import own_cores
from ..numerics import QTensor, RngKey
from . import cpu_scratch
from .base import DILATED_HOOKS, FP8_DEPTHWISE_HOOKS, Backend
from .grouped_hooks import GROUPED_HOOKS, GroupedHooks, is_depthwise
from .ops_ref import BRANCH_HOOKS, DEPTHWISE_HOOKS, FLOAT_RECIPE_HOOKS

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


def _bounds(act) -> tuple[float, float]:
    """clip's (lo, hi) of a bn_act_s8 activation, (0, 0) for the others."""
    return (float(act[1]), float(act[2])) if act[0] == "clip" else (0.0, 0.0)


def _shift(shift: int | None) -> int:
    return -1 if shift is None else int(shift)


class CpuBackend(Backend):
    name = "cpu"
    hooks = frozenset(
        {
            "gemm_s8",
            "conv2d_s8",
            "conv2d_bwd_data_s8",
            "conv2d_bwd_weight_s8",
            *DILATED_HOOKS,  # dilated_gather.cpp's patches into the native gemm_s8 / gemm_requant_s8
            *GROUPED_HOOKS,  # conv_grouped.cpp: one call a pass; depthwise: grouped_hooks.py on dwconv.cpp
            *FP8_DEPTHWISE_HOOKS,  # dwconv_fp16.cpp
            "absmax",
            "shift_round",
            "requantize",
            "conv2d_requant_s8",
            "gemm_requant_s8",
            "conv2d_bwd_data_requant_s8",
            "relu_s8",
            "relu_bwd_s8",
            "maxpool_s8",
            "maxpool_bwd_s8",
            "niti_loss_grad_s8",
            "niti_update_s8",
            "dropout_mask",
            "gemm_f32",
            "conv2d_f32",
            "conv2d_bwd_data_f32",
            "conv2d_bwd_weight_f32",
            *FLOAT_RECIPE_HOOKS,
            *DEPTHWISE_HOOKS,
            "dwconv2d_requant_s8",
            "dwconv2d_bwd_data_requant_s8",
            *BRANCH_HOOKS,
        }
    )
    blocks_for_cache = True  # cpu_ops/gemm_driver.cpp: Goto-style blocking (A blocks in L2, B panels in L1)

    def __init__(self):
        if _native is None:
            raise RuntimeError(f"cpu backend: native extension not importable: {_IMPORT_ERROR}")
        forced = os.environ.get(ISA_ENV)
        _native.set_isa(forced if forced else _native.supported_isas()[0])
        self.isa = _native.isa()
        own_cores()  # one owner of the cores: the native pool; BLAS gets one thread

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
        """The native kernels' grow-only scratch for `op` on `rows` rows, by buffer (cpu_scratch.py)."""
        return cpu_scratch.scratch_bytes(_native, graph, op, rows)

    # ------------------------------------------------------------ int8 products
    def gemm_s8(self, a, b):
        return _native.gemm_s8(a, b)

    def conv2d_s8(self, x, w, stride, pad):
        return _native.conv2d_s8(x, w, stride, pad)

    def conv2d_bwd_data_s8(self, err, w, stride, pad, in_hw):
        return _native.conv2d_bwd_data_s8(err, w, stride, pad, tuple(in_hw))

    def conv2d_bwd_weight_s8(self, err, x, stride, pad, kernel):
        return _native.conv2d_bwd_weight_s8(err, x, stride, pad, tuple(kernel))

    # ------------------------------------------------------------ dilated products (cpu_ops/dilated_gather.cpp)
    # base.py's composition with the patch gathers native: the patches (K-major for the weight
    # gradient, with err transposed natively) into the native GEMM; only the weight's tap flip
    # for backward data (O*KH*KW*C bytes) stays a NumPy copy.
    def conv2d_dilated_s8(self, x, w, stride, pad, dilation):
        cols = _native.dilated_patches_s8(x, w.shape[1:3], stride, pad, dilation)
        return _native.gemm_s8(cols, layout.gemm_weight(w)).reshape(_dilated_shape(x, w, stride, pad, dilation))

    def conv2d_dilated_requant_s8(self, x, w, stride, pad, dilation, mode, rng, shift=None):
        cols = _native.dilated_patches_s8(x, w.shape[1:3], stride, pad, dilation)
        q, shift = self.gemm_requant_s8(cols, layout.gemm_weight(w), mode, rng, shift)
        return q.reshape(_dilated_shape(x, w, stride, pad, dilation)), shift

    def conv2d_dilated_bwd_data_s8(self, err, w, stride, pad, dilation, in_hw):
        cols = _native.transposed_patches_s8(err, w.shape[1:3], stride, pad, dilation, tuple(in_hw))
        return _native.gemm_s8(cols, layout.flipped_taps(w)).reshape(err.shape[0], *in_hw, w.shape[-1])

    def conv2d_dilated_bwd_data_requant_s8(self, err, w, stride, pad, dilation, in_hw, mode, rng, shift=None):
        cols = _native.transposed_patches_s8(err, w.shape[1:3], stride, pad, dilation, tuple(in_hw))
        q, shift = self.gemm_requant_s8(cols, layout.flipped_taps(w), mode, rng, shift)
        return q.reshape(err.shape[0], *in_hw, w.shape[-1]), shift

    def conv2d_dilated_bwd_weight_s8(self, err, x, stride, pad, dilation, kernel):
        o = err.shape[-1]
        cols_t = _native.dilated_patches_s8(x, tuple(kernel), stride, pad, dilation, True)
        grad = _native.gemm_s8(_native.transpose_s8(err.reshape(-1, o)), cols_t)
        return grad.reshape(o, *kernel, x.shape[-1])

    # ------------------------------------------------------------ grouped products (cpu_ops/conv_grouped.cpp)
    # One native call a pass: each group's channels read from the tensor natively into the dense
    # conv paths, its sums written into its channels, then one rounding of the whole tensor. A
    # depthwise conv keeps grouped_hooks.py's route onto dwconv.cpp (polyphase when dilated).
    def conv2d_grouped_s8(self, x, w, stride, pad, dilation, groups):
        if is_depthwise(x.shape[-1], w.shape[0], groups):
            return GroupedHooks.conv2d_grouped_s8(self, x, w, stride, pad, dilation, groups)
        return _native.conv2d_grouped_s8(x, w, stride, pad, dilation, groups)

    def conv2d_grouped_requant_s8(self, x, w, stride, pad, dilation, groups, mode, rng, shift=None):
        if is_depthwise(x.shape[-1], w.shape[0], groups):
            return GroupedHooks.conv2d_grouped_requant_s8(self, x, w, stride, pad, dilation, groups, mode, rng, shift)
        return _native.conv2d_grouped_requant_s8(x, w, stride, pad, dilation, groups, _shift(shift), mode, _rng(rng))

    def conv2d_grouped_bwd_data_s8(self, err, w, stride, pad, dilation, groups, in_hw):
        if is_depthwise(w.shape[0] * w.shape[-1], err.shape[-1], groups):
            return GroupedHooks.conv2d_grouped_bwd_data_s8(self, err, w, stride, pad, dilation, groups, in_hw)
        return _native.conv2d_grouped_bwd_data_s8(err, w, stride, pad, dilation, groups, tuple(in_hw))

    def conv2d_grouped_bwd_data_requant_s8(self, err, w, stride, pad, dilation, groups, in_hw, mode, rng, shift=None):
        if is_depthwise(w.shape[0] * w.shape[-1], err.shape[-1], groups):
            return GroupedHooks.conv2d_grouped_bwd_data_requant_s8(
                self, err, w, stride, pad, dilation, groups, in_hw, mode, rng, shift
            )
        return _native.conv2d_grouped_bwd_data_requant_s8(
            err, w, stride, pad, dilation, groups, tuple(in_hw), _shift(shift), mode, _rng(rng)
        )

    def conv2d_grouped_bwd_weight_s8(self, err, x, stride, pad, dilation, groups, kernel):
        if is_depthwise(x.shape[-1], err.shape[-1], groups):
            return GroupedHooks.conv2d_grouped_bwd_weight_s8(self, err, x, stride, pad, dilation, groups, kernel)
        return _native.conv2d_grouped_bwd_weight_s8(err, x, stride, pad, dilation, groups, tuple(kernel))

    # ------------------------------------------------------------ depthwise products (cpu_ops/dwconv.cpp)
    def dwconv2d_s8(self, x, w, stride, pad):
        return _native.dwconv2d_s8(x, w, stride, pad)

    def dwconv2d_requant_s8(self, x, w, stride, pad, mode, rng, shift=None):
        return _native.dwconv2d_requant_s8(x, w, stride, pad, _shift(shift), mode, _rng(rng))

    def dwconv2d_bwd_data_s8(self, err, w, stride, pad, in_hw):
        return _native.dwconv2d_bwd_data_s8(err, w, stride, pad, tuple(in_hw))

    def dwconv2d_bwd_data_requant_s8(self, err, w, stride, pad, in_hw, mode, rng, shift=None):
        return _native.dwconv2d_bwd_data_requant_s8(err, w, stride, pad, tuple(in_hw), _shift(shift), mode, _rng(rng))

    def dwconv2d_bwd_weight_s8(self, err, x, stride, pad, kernel):
        return _native.dwconv2d_bwd_weight_s8(err, x, stride, pad, tuple(kernel))

    def dwconv2d_f32(self, x, w, stride, pad):
        return _native.dwconv2d_f32(x, w, stride, pad)

    def dwconv2d_bwd_data_f32(self, err, w, stride, pad, in_hw):
        return _native.dwconv2d_bwd_data_f32(err, w, stride, pad, tuple(in_hw))

    def dwconv2d_bwd_weight_f32(self, err, x, stride, pad, kernel):
        return _native.dwconv2d_bwd_weight_f32(err, x, stride, pad, tuple(kernel))

    def dwconv2d_fp16_chunked(self, x, w, stride, pad, chunk, fp16_adds):
        return _native.dwconv2d_fp16_chunked(x, w, stride, pad, chunk, fp16_adds)

    def dwconv2d_bwd_data_fp16(self, err, w, stride, pad, in_hw):
        return _native.dwconv2d_bwd_data_fp16(err, w, stride, pad, tuple(in_hw))

    def dwconv2d_bwd_weight_fp16_chunked(self, err, x, stride, pad, kernel, chunk, fp16_adds):
        return _native.dwconv2d_bwd_weight_fp16_chunked(err, x, stride, pad, tuple(kernel), chunk, fp16_adds)

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

    # ------------------------------------------------------------ float recipes (cpu_ops/quant.cpp, eltwise_f32.cpp,
    # pool_f32.cpp, update.cpp, gemm_exact.cpp)
    def absmax_f(self, x):
        return float(_native.absmax_f(_float(x)))

    def quantize_f(self, x, step, bits, mode, rng):
        return _native.quantize_f(_float(x), float(step), int(bits), mode, _rng(rng))

    def dequantize(self, acc, scale, reuse=False):
        if reuse and _owned_int32(acc):  # the floats over the sums: the same bits, no new tensor
            _native.dequantize_in_place(acc, float(scale))
            return acc.view(np.float32)
        return _native.dequantize(acc, float(scale))

    def dequantize_compensate(self, acc, scale, comp_scale, comp_shift, reuse=False, relu=False):
        return _native.dequantize_compensate(
            acc,
            float(scale),
            np.asarray(comp_scale, np.float32),
            np.asarray(comp_shift, np.float32),
            bool(reuse and _owned_int32(acc)),
            bool(relu),
        )

    def prc_squared_errors(self, x, top, ratios, qmax):
        return _native.prc_squared_errors(np.asarray(x, np.float32), float(top), [float(r) for r in ratios], int(qmax))

    def prc_quantize(self, x, prev_ratio, momentum, ratios, bits, mode, rng):
        return _native.prc_quantize(
            np.asarray(x, np.float32),
            float(prev_ratio),
            float(momentum),
            [float(r) for r in ratios],
            int(bits),
            mode,
            _rng(rng),
        )

    def quantize_mls(self, x, group, top, tensor_scale, kmax, qmax, mode, rng):
        return _native.quantize_mls(
            np.asarray(x, np.float32),
            int(group),
            float(top),
            float(tensor_scale),
            int(kmax),
            int(qmax),
            mode,
            _rng(rng),
        )

    def quantize_mls_ranged(self, x, group, kmax, qmax, mode, rng):
        aligned, top = _native.quantize_mls_ranged(
            np.asarray(x, np.float32), int(group), int(kmax), int(qmax), mode, _rng(rng)
        )
        return aligned, float(top)

    def round_float(self, x, exponent_bits, mantissa_bits, mode, rng):
        return _native.round_float(_float(x), int(exponent_bits), int(mantissa_bits), mode, _rng(rng))

    def matmul_s16(self, a, b, a_transposed=False):
        return _native.matmul_s16(a, b, bool(a_transposed))

    def conv2d_s16(self, x, w, stride, pad):
        return _native.conv2d_s16(x, w, int(stride), int(pad))

    def conv2d_bwd_weight_s16(self, err, x, stride, pad, kernel):
        return _native.conv2d_bwd_weight_s16(err, x, int(stride), int(pad), tuple(kernel))

    def conv2d_bwd_data_s16(self, err, w, stride, pad, in_hw):
        return _native.conv2d_bwd_data_s16(err, w, int(stride), int(pad), tuple(in_hw))

    def im2col(self, x, kh, kw, stride, pad):
        return _native.im2col(x, int(kh), int(kw), int(stride), int(pad))

    def col2im(self, dcols, err_nhw, kernel_hwc, stride, pad, in_hw):
        return _native.col2im(dcols, list(err_nhw), list(kernel_hwc), int(stride), int(pad), tuple(in_hw))

    def matmul_fp16_chunked(self, a, b, a_transposed, chunk, fp16_adds):
        return _native.matmul_fp16_chunked(
            np.asarray(a, np.float32), np.asarray(b, np.float32), bool(a_transposed), int(chunk), bool(fp16_adds)
        )

    def relu_f32(self, x):
        return _native.relu_f32(x)

    # the mobile CNNs' layers (cpu_ops/layers_f32.cpp)
    def act_f32(self, x, function, params):
        return _native.act_f32(x, function, [float(p) for p in params])

    def act_bwd_f32(self, err, x, function, params):
        return _native.act_bwd_f32(err, x, function, [float(p) for p in params])

    def mul_f32(self, x, g):
        return _native.mul_f32(x, g)

    def mul_bwd_f32(self, err, x, g):
        return _native.mul_bwd_f32(err, x, g)

    def concat_channels(self, parts):
        return _native.concat_channels(list(parts))

    def slice_channels(self, x, start, stop):
        return _native.slice_channels(x, int(start), int(stop))

    def pad_channels(self, err, start, channels):
        return _native.pad_channels(err, int(start), int(channels))

    def channel_shuffle(self, x, groups):
        return _native.channel_shuffle(x, int(groups))

    def bn_fwd_f32(self, x, gamma, beta, mean, var, training, momentum, eps):
        return _native.bn_fwd_f32(x, gamma, beta, mean, var, bool(training), float(momentum), float(eps))

    def bn_bwd_f32(self, err, xhat, inv_std, gamma):
        return _native.bn_bwd_f32(err, xhat, inv_std, gamma)

    # NITI's batch norm with its casts fused (cpu_ops/bn_cast.cpp)
    def bn_act_s8(self, x, gamma, beta, mean, var, training, momentum, eps, act, mode, rng):
        q, e, stats, new_mean, new_var = _native.bn_act_s8(
            x.q, int(x.e), gamma, beta, mean, var, bool(training), float(momentum), float(eps),
            act[0], _bounds(act), mode, _rng(rng)
        )  # fmt: skip
        return QTensor(q, e), stats, new_mean, new_var

    def bn_act_bwd_s8(self, err, x, stats, gamma, beta, act, mode, rng, input_error=True):
        dx, e, d_gamma, d_beta = _native.bn_act_bwd_s8(
            err.q, int(err.e), x.q, int(x.e), stats, gamma, beta, act[0], _bounds(act), mode, _rng(rng), input_error
        )
        return (QTensor(dx, e) if input_error else None), d_gamma, d_beta

    def channel_mean_f32(self, x):
        return _native.channel_mean_f32(x)

    def channel_sum_f32(self, x):
        return _native.channel_sum_f32(x)

    def add_f32(self, a, b):
        return _native.add_f32(a, b)

    def softmax_xent_grad_f32(self, logits, labels, divisor):
        return _native.softmax_xent_grad_f32(logits, labels, float(divisor))

    def bn_fwd_grid_f32(self, x, gamma, beta, mean, var, training, momentum, eps, stat_bits, affine_bits):
        return _native.bn_fwd_grid_f32(x, gamma, beta, mean, var, training, momentum, eps, stat_bits, affine_bits)

    def bn_bwd_grid_f32(self, err, xhat, inv_std, gamma, error_bits, affine_bits):
        return _native.bn_bwd_grid_f32(err, xhat, inv_std, gamma, error_bits, affine_bits)

    def dropout_mask(self, shape, p, rng):
        """ops_ref.dropout_mask's mask from the native Threefry words (cpu_ops/threefry.cpp):
        keep an element when its word is at least p * 2**32."""
        threshold = min(int(round(p * 2**32)), 2**32 - 1)
        return (_native.random_u32(_rng(rng), int(np.prod(shape))) >= threshold).reshape(shape)

    def dropout_apply_f32(self, x, keep, p):
        return _native.dropout_apply_f32(x, keep, float(p))

    def bias_add_f32(self, y, b):
        return _native.bias_add_f32(y, b)

    def channel_mean_bwd_f32(self, err, in_hw):
        return _native.channel_mean_bwd_f32(err, tuple(in_hw))

    def maxpool_pad_f32(self, x, kernel, stride, pad, out_hw):
        return _native.maxpool_pad_f32(x, kernel, stride, pad, tuple(out_hw))

    def maxpool_pad_bwd_f32(self, err, argmax, kernel, stride, pad, in_hw):
        return _native.maxpool_pad_bwd_f32(err, argmax, kernel, stride, pad, tuple(in_hw))

    def relu_bwd_f32(self, err, y):
        return _native.relu_bwd_f32(err, y)

    def maxpool_f32(self, x, kernel, stride):
        return _native.maxpool_f32(x, kernel, stride)

    def maxpool_bwd_f32(self, err, argmax, kernel, stride, in_hw):
        return _native.maxpool_bwd_f32(err, argmax, kernel, stride, tuple(in_hw))

    def relu_maxpool_f32(self, x, kernel, stride):
        return _native.relu_maxpool_f32(x, kernel, stride)

    def relu_maxpool_bwd_f32(self, err, y, argmax, kernel, stride, in_hw):
        return _native.relu_maxpool_bwd_f32(err, y, argmax, kernel, stride, tuple(in_hw))

    def pool_compensation_bwd(self, err, gate, argmax, kernel, stride, z, scale):
        return _native.pool_compensation_bwd(err, gate, argmax, kernel, stride, z, scale)

    def compensation_fwd(self, z, scale, shift):
        return _native.compensation_fwd(z, scale, shift)

    def compensation_bwd(self, err, z, scale, gate=None):
        return _native.compensation_bwd(err, z, scale, gate)

    def wageubn_update(self, q, e, grad, m, lr, momentum, weight_decay, grad_bits, momentum_bits, acc_bits, rng):
        return _native.wageubn_update(
            q,
            int(e),
            grad,
            m,
            float(lr),
            float(momentum),
            float(weight_decay),
            int(grad_bits),
            int(momentum_bits),
            int(acc_bits),
            _rng(rng),
        )

    def sgd_f32(self, w, grad, v, lr, momentum, weight_decay, nesterov):
        return _native.sgd_f32(w, grad, v, float(lr), float(momentum), float(weight_decay), bool(nesterov))

    def sgd_f32_group(self, params, lr, momentum, weight_decay, nesterov):
        return _native.sgd_f32_group(list(params), float(lr), float(momentum), float(weight_decay), bool(nesterov))

    # ------------------------------------------------------------ float32 products (the FP32 recipe;
    # cpu_ops/gemm_f32.cpp, conv_f32.cpp: within float32 rounding of ref's BLAS)
    def gemm_f32(self, a, b, b_transposed=True):
        return _native.gemm_f32(a, b, b_transposed)

    def conv2d_f32(self, x, w, stride, pad):
        return _native.conv2d_f32(x, w, stride, pad)

    def conv2d_bwd_data_f32(self, err, w, stride, pad, in_hw):
        return _native.conv2d_bwd_data_f32(err, w, stride, pad, tuple(in_hw))

    def conv2d_bwd_weight_f32(self, err, x, stride, pad, kernel):
        return _native.conv2d_bwd_weight_f32(err, x, stride, pad, tuple(kernel))


def _dilated_shape(x, w, stride, pad, dilation) -> tuple:
    return (x.shape[0], *(layout.out_size(x.shape[a], w.shape[a], stride, pad, dilation) for a in (1, 2)), w.shape[0])


def _owned_int32(acc) -> bool:
    """An int32 array with its own writable, C-contiguous memory (a kernel's fresh result)."""
    return (
        isinstance(acc, np.ndarray)
        and acc.dtype == np.int32
        and acc.base is None
        and acc.flags.c_contiguous
        and acc.flags.writeable
    )


def _float(x):
    """float32 or float64 as they are (the kernels take both); anything else as float64."""
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)
