"""The CPU kernels' kept scratch for one op, sized by cpu_ops/scratch.cpp.

CpuBackend.scratch_bytes asks here: the op's declared product (graph.Product) says where
its operands are and its hooks which kernels run; the sizes come from the native module
(its scratch.cpp, beside the kernels), never from Python arithmetic of their buffers.
"""

from __future__ import annotations

import numpy as np

# The hooks of the int8 products, plain or requantizing: the kernels whose scratch scratch.cpp sizes.
INT8_PRODUCT_HOOKS = frozenset(
    {
        "gemm_s8",
        "conv2d_s8",
        "conv2d_bwd_data_s8",
        "conv2d_bwd_weight_s8",
        "gemm_requant_s8",
        "conv2d_requant_s8",
        "conv2d_bwd_data_requant_s8",
    }
)


# The grouped convolutions' (not depthwise ones: grouped_hooks.py composes those on dwconv.cpp),
# plain or requantizing: cpu_ops/conv_grouped.cpp sizes their scratch.
GROUPED_HOOKS = frozenset(
    {
        "conv2d_grouped_s8",
        "conv2d_grouped_requant_s8",
        "conv2d_grouped_bwd_data_s8",
        "conv2d_grouped_bwd_data_requant_s8",
        "conv2d_grouped_bwd_weight_s8",
    }
)

# The emulated recipes' exact products (cpu_ops/gemm_exact.cpp) and the FP32 recipe's
# convolutions (cpu_ops/conv_f32.cpp): their kept buffers are sized there too.
EXACT_PRODUCT_HOOKS = ("matmul_s16", "matmul_fp16_chunked")
F32_CONV_HOOKS = frozenset({"conv2d_f32", "conv2d_bwd_data_f32", "conv2d_bwd_weight_f32"})
# The depthwise convolutions (cpu_ops/dwconv.cpp): hook -> (pass, bytes per element), for their scratch.
DEPTHWISE_PASSES = {
    "dwconv2d_s8": ("forward", 1),
    "dwconv2d_requant_s8": ("forward", 1),
    "dwconv2d_bwd_data_s8": ("backward_data", 1),
    "dwconv2d_bwd_data_requant_s8": ("backward_data", 1),
    "dwconv2d_bwd_weight_s8": ("backward_weight", 1),
    "dwconv2d_f32": ("forward", 4),
    "dwconv2d_bwd_data_f32": ("backward_data", 4),
    "dwconv2d_bwd_weight_f32": ("backward_weight", 4),
}


def _conv_operands(product, shapes):
    """(x shape, w shape) of a conv product from its tensors' shapes (inputs, then outputs):
    graph.Product's layout, (x, w), (err, w) -> dx, (err, x) -> dw."""
    return {
        "forward": (shapes[0], shapes[1]),
        "backward_data": (shapes[2], shapes[1]),
        "backward_weight": (shapes[1], shapes[2]),
    }[product.pass_]


def _exact_mnk(product, shapes, op, rows) -> tuple[int, int, int, bool]:
    """(m, n, k, a_transposed) of the exact product op(a)[M,K] x b[K,N] that
    algorithms/_products.py (int16_product) and fp8.py (chunked_product) run for `op`
    on `rows` rows: patches x weights, error x weights, error^T x patches."""
    x, w = _conv_operands(product, shapes)
    o = w[0]
    if product.layer == "conv":
        stride, pad = op.attrs["stride"], op.attrs["pad"]
        oh, ow = (x[1] + 2 * pad - w[1]) // stride + 1, (x[2] + 2 * pad - w[2]) // stride + 1
        pixels, taps = rows * oh * ow, w[1] * w[2] * w[3]
    else:
        pixels, taps = rows, int(np.prod(w[1:]))
    return {
        "forward": (pixels, o, taps, False),
        "backward_data": (pixels, taps, o, False),
        "backward_weight": (o, taps, pixels, True),
    }[product.pass_]


def scratch_bytes(native, graph, op, rows) -> dict[str, int]:
    """The native kernels' grow-only scratch for `op` on `rows` rows, by buffer, as `native`
    (the _cpu_ops extension) sizes it. The op's declared product (graph.Product) says where
    its operands are, its hooks which kernels run: the int8 ones, the emulated recipes' exact int16 and chunked FP16 products
    (matmul_s16, matmul_fp16_chunked: their packed operands, on the calling thread) and
    the FP32 convolutions (a block of patches and a padded image per pool thread)."""
    product = op.product
    if product is None:
        return {}
    shape = [graph.tensors[t].shape for t in (*op.inputs, *op.outputs)]
    if GROUPED_HOOKS.intersection(op.hooks) and not op.attrs.get("depthwise"):  # cpu_ops/conv_grouped.cpp
        x, w = _conv_operands(product, shape)
        a = op.attrs
        sizes = [rows, *x[1:], *w[:3], a["stride"], a["pad"], a.get("dilation", 1), a["groups"]]
        return dict(native.grouped_scratch_bytes(product.pass_, sizes, op.is_requant()))
    depthwise = [h for h in op.hooks if h in DEPTHWISE_PASSES]
    if depthwise:
        return _depthwise_scratch(native, depthwise[0], product, shape, op, rows)
    exact = [h for h in EXACT_PRODUCT_HOOKS if h in op.hooks]
    if exact:
        m, n, k, a_transposed = _exact_mnk(product, shape, op, rows)
        if exact[0] == "matmul_s16" and product.layer == "conv":  # conv2d_s16, conv2d_bwd_*_s16: per image
            x, w = _conv_operands(product, shape)
            hook = {"forward": "conv2d_s16", "backward_data": "conv2d_bwd_data_s16"}.get(
                product.pass_, "conv2d_bwd_weight_s16"
            )
            return dict(native.scratch_bytes(hook, [rows, *x[1:], *w[:3], op.attrs["stride"], op.attrs["pad"]], False))
        fourth = int(a_transposed) if exact[0] == "matmul_s16" else int(op.attrs.get("chunk", 64))
        return dict(native.scratch_bytes(exact[0], [m, n, k, fourth], False))
    if product.layer == "conv" and F32_CONV_HOOKS.intersection(op.hooks):
        x, w = _conv_operands(product, shape)
        sizes = [rows, *x[1:], *w[:3], op.attrs["stride"], op.attrs["pad"]]
        return dict(native.scratch_bytes(f"{product.pass_}_f32", sizes, False))
    if not INT8_PRODUCT_HOOKS.intersection(op.hooks):
        return {}
    requant = op.is_requant()
    if product.layer == "conv":  # x: (N, H, W, C), w: (O, KH, KW, C)
        x, w = _conv_operands(product, shape)
        sizes = [rows, *x[1:], *w[:3], op.attrs["stride"], op.attrs["pad"]]
        return dict(native.scratch_bytes(product.pass_, sizes, requant))
    if product.pass_ != "backward_weight":  # a[rows, K] @ b[N, K].T
        w = shape[1]
        n, k = (w[0], w[1]) if product.pass_ == "forward" else (w[1], w[0])
        return dict(native.scratch_bytes("gemm", [rows, n, k], requant))
    o, i = int(np.prod(shape[0][1:])), int(np.prod(shape[1][1:]))  # err.T[O, rows] @ x.T[I, rows].T
    return dict(native.scratch_bytes("gemm", [o, i, rows], requant))


def _depthwise_scratch(native, hook, product, shapes, op, rows) -> dict[str, int]:
    """A depthwise pass's kept buffers (cpu_ops/dwconv.h dwconv_scratch): x (N, H, W, C),
    w (C, KH, KW, 1), from the product's operands as a dense conv's."""
    pass_, element_bytes = DEPTHWISE_PASSES[hook]
    x, w = _conv_operands(product, shapes)
    sizes = [rows, *x[1:], w[1], w[2], op.attrs["stride"], op.attrs["pad"]]
    return dict(native.dwconv_scratch_bytes(pass_, sizes, element_bytes, hook.endswith("requant_s8")))
