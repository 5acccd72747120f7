"""The ONNX pooling operators: MaxPool (pads, ceil_mode), AveragePool, GlobalAveragePool
and ReduceMean over H and W (a global average pool kept as a 1x1 image, or read as a
vector when every reader flattens it).

Operator semantics: the ONNX operator specification (github.com/onnx/onnx, docs/Operators.md).
"""

from __future__ import annotations

from ..nn import AvgPool2d, GlobalAvgPool, MaxPool2d
from .onnx_common import act_of, check_attrs, const_of, emit, image_of, layer_name, pads_of, reads_previous, square


def maxpool(state, node, attrs):
    check_attrs(
        state,
        node,
        attrs,
        {
            "kernel_shape": None,
            "strides": None,
            "pads": None,
            "auto_pad": None,
            "dilations": lambda d: all(v == 1 for v in d),
            "ceil_mode": None,
            "storage_order": lambda s: s == 0,
        },
    )
    if len(node.output) > 1 and node.output[1]:
        raise state.fail(node, "the Indices output is not supported")
    x = act_of(state, node)
    reads_previous(state, node, x)
    c, h, w = image_of(state, node, x)
    kernel = square(state, node, "kernel_shape", attrs["kernel_shape"])
    stride = square(state, node, "strides", attrs.get("strides", [1, 1]))
    pad = pads_of(state, node, attrs)
    if 2 * pad > kernel:
        raise state.fail(node, f"pads={list(attrs['pads'])} are more than half of kernel_shape={[kernel, kernel]}")
    ceil = bool(attrs.get("ceil_mode", 0)) and any(  # a ceil_mode adding no window is the plain pool
        MaxPool2d("p", kernel, stride, pad, True).out_shape((n, n, 1))[0]
        != MaxPool2d("p", kernel, stride, pad, False).out_shape((n, n, 1))[0]
        for n in (h, w)
    )
    layer = MaxPool2d(layer_name(state, node, None), kernel, stride, pad, ceil)
    oh, ow, _ = layer.out_shape((h, w, c))
    emit(state, node, layer, (c, oh, ow), (oh, ow, c))


_TO_VECTOR = {"Flatten", "Reshape", "Squeeze"}


def _global_pool(state, node, x, keep_dims=True):
    """A mean over H and W; read as a vector when every reader flattens it (a classifier's
    head), else kept as a 1x1 image (a squeeze-excitation's, read by 1x1 convs)."""
    reads_previous(state, node, x)
    c, _, _ = image_of(state, node, x)
    readers = state.consumers.get(node.output[0], [])
    as_image = keep_dims and any(r not in _TO_VECTOR for r in readers)
    layer = GlobalAvgPool(layer_name(state, node, None), keep_dims=as_image)
    emit(state, node, layer, (c, 1, 1) if keep_dims else (c,), (1, 1, c) if as_image else (c,))


def reduce_mean(state, node, attrs):
    """ReduceMean over H and W (axes [2, 3] or [-2, -1]; an attribute before opset 18, an input since)."""
    check_attrs(
        state, node, attrs, {"axes": None, "keepdims": lambda k: k in (0, 1), "noop_with_empty_axes": lambda v: v == 0}
    )
    x = act_of(state, node)
    axes = list(attrs.get("axes", [])) or (
        [int(v) for v in const_of(state, node, 1, "the axes")] if len(node.input) > 1 and node.input[1] else []
    )
    if sorted(a % 4 for a in axes) != [2, 3]:
        raise state.fail(node, f"axes={axes} is not supported: only the mean over H and W (axes [2, 3])")
    _global_pool(state, node, x, keep_dims=bool(attrs.get("keepdims", 1)))


def global_average_pool(state, node, attrs):
    check_attrs(state, node, attrs, {})
    _global_pool(state, node, act_of(state, node))


def average_pool(state, node, attrs):
    """A window over the whole input without padding is a global average (which NITI also
    lowers); any other square window, stride and equal padding an AvgPool2d (float recipes)."""
    check_attrs(
        state,
        node,
        attrs,
        {
            "kernel_shape": None,
            "strides": None,
            "pads": None,
            "auto_pad": None,
            "ceil_mode": None,
            "count_include_pad": lambda v: v in (0, 1),
            "dilations": lambda d: all(v == 1 for v in d),
        },
    )
    x = act_of(state, node)
    c, h, w = image_of(state, node, x)
    pad = pads_of(state, node, attrs)
    if list(attrs["kernel_shape"]) == [h, w] and not pad:
        return _global_pool(state, node, x)
    reads_previous(state, node, x)
    kernel = square(state, node, "kernel_shape", attrs["kernel_shape"])
    stride = square(state, node, "strides", attrs.get("strides", [1, 1]))
    if pad >= kernel:
        raise state.fail(node, f"pads={list(attrs['pads'])} are not smaller than kernel_shape={[kernel, kernel]}")
    if attrs.get("ceil_mode", 0) and ((h + 2 * pad - kernel) % stride or (w + 2 * pad - kernel) % stride):
        raise state.fail(
            node,
            f"ceil_mode=1 on a {h}x{w} input with kernel {kernel}, stride {stride}, pads {pad} "
            f"adds a partial window; dsptrain's average pool has none",
        )
    layer = AvgPool2d(layer_name(state, node, None), kernel, stride, pad, bool(attrs.get("count_include_pad", 0)))
    oh, ow, _ = layer.out_shape((h, w, c))
    emit(state, node, layer, (c, oh, ow), (oh, ow, c))
