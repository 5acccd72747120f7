"""The shared lowering of the emulated recipes (Octo, WAGEUBN, AFP, MLS, FP8).

These recipes keep float tensors between ops and put every operand of a product on the
recipe's number grid first, exactly (the way their papers evaluate them). A conv or
linear layer lowers to:

    forward   quant_weight (w -> wq), quant_act (x -> xq), fwd (xq x wq -> out)
    backward  quant_err (err -> eq), bwd_data (eq x wq -> err_in), bwd_weight (eq x xq -> grad)
    update    update (w, grad, optimizer state -> w, optimizer state)

A layer with a bias adds it (float) to the product's output, and its gradient (the float
error summed over rows) takes the recipe's update like a weight.

A recipe module supplies a `Numerics` subclass (its grids, products, update rule and
extra state) and gets the module-level contract of `algorithms/__init__.py` back from
`Emulated`. Every op runs on backend hooks, so placement puts it where it really runs
(each op function calls the hooks of the backend it is handed):
quantizers on absmax_f/quantize_f (or the recipe's own), products whose operands are
int8 with one scale per tensor on the int8 hooks (gemm_s8, conv2d_s8, ...: the CPU and
DSP backends), int16 operands (MLS's group-aligned elements, AFP's 16-bit errors) on
matmul_s16, updates on sgd_f32 (or the recipe's). ReLU, max-pool, average pool, flatten, dropout
and the loss are FP32's ops. Not a recipe: no YAML names this module.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError, LoweringError
from ..layout import col2im, im2col, out_size
from ..nn import (Add, AvgPool2d, BatchNorm2d, Conv2d, Dropout, Flatten, GlobalAvgPool, Linear, MaxPool2d, ReLU,
                  has_bias)
from . import _float_layers as fl
from . import fp32
from ._quant import Scaled

LOWERABLE = (Conv2d, Linear, ReLU, MaxPool2d, AvgPool2d, Flatten, Dropout, BatchNorm2d, GlobalAvgPool, Add)
_INT8_HOOKS = {"conv": ("conv2d_s8",), "conv_bwd_data": ("conv2d_bwd_data_s8",),
               "conv_bwd_weight": ("conv2d_bwd_weight_s8",), "linear": ("gemm_s8",)}


# ---------------------------------------------------------------- products

def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0], -1)


def product(backend, kind: str, a: Scaled, b: Scaled, attrs: dict) -> np.ndarray:
    """The float32 result of a layer product of two quantized operands.

    kind: fwd (x, w), bwd_data (err, w), bwd_weight (err, x); attrs has `conv` and the
    conv geometry. int8 operands with one scale each go through the backend's int8 hooks;
    int16 ones (MLS's group-aligned elements, AFP's 16-bit errors) through matmul_s16 and
    the s16 convolutions (a backend without them hands the op on: the executor's
    NoSupport). Either way the exact integer sums are multiplied by the two scales once
    (`dequantize`). Anything else is summed in float64 from exact values.
    """
    if a.scalar_int8 and b.scalar_int8:
        acc = _int8_product(backend, kind, a.q, b.q, attrs)
        return backend.dequantize(acc, float(a.scale) * float(b.scale), True)   # acc: ours to overwrite
    if _scalar_int(a) and _scalar_int(b):
        acc = _int16_product(backend, kind, a.q.astype(np.int16, copy=False), b.q.astype(np.int16, copy=False), attrs)
        return backend.dequantize(acc, float(a.scale) * float(b.scale))
    return _float64_product(kind, a.values(), b.values(), attrs).astype(np.float32)


def product_workspace(path: str, pass_: str, attrs: dict, x_shape, w_shape, bias: bool = False,
                      dtypes: tuple[str, str] = ("", "")) -> tuple[int, int]:
    """(bytes per row of the batch, bytes) a layer product allocates beside its result while
    it runs, by the arrays `product` (below) and fp8.chunked_product make: the patches
    (im2col), a transposed weight copy, the exact sums (int64 for int16 operands, int32 for
    int8, float32 for FP16 chunks), the scattered image (col2im) and its float64 copy, on
    the cpu backend (conv2d_bwd_data_s16 fused; other backends compose it with more). The
    memory plan adds it to the op's workspace (memory.planner.op_workspace);
    On the int16 path an int8 operand (`dtypes`: the product's two operands', AFP's int8
    weights and activations against its 16-bit errors) is widened to an int16 copy first.
    tests/null/test_planned_sizes.py measures it (tracemalloc)."""
    o, batch = w_shape[0], x_shape[0]
    taps = int(np.prod(w_shape[1:]))
    if attrs["conv"]:
        kh, kw, s, p = w_shape[1], w_shape[2], attrs["stride"], attrs["pad"]
        pixels = out_size(x_shape[1], kh, s, p) * out_size(x_shape[2], kw, s, p)
        image = int(np.prod(x_shape[1:]))
    else:
        pixels, image = 1, 0
    conv = bool(attrs["conv"])
    per_row, fixed = (pixels * o * 4 if bias else 0), 0      # a bias adds to a copy of the result
    if path == "int16":      # matmul_s16: int16 patches, int64 sums, col2im in int64
        per_row += {"forward": conv * pixels * taps * 2 + pixels * o * 8,    # a conv's backward data: fused
                    "backward_data": image * 8 if conv else taps * 8,          # (conv2d_bwd_data_s16), int64 image
                    "backward_weight": conv * pixels * taps * 2}[pass_]
        fixed += {"forward": taps * o * 2, "backward_weight": o * taps * 8}.get(pass_, 0)
        first, second = (d == "int8" for d in dtypes)      # _int16_product's astype(int16) copies
        rows_of_x = image if conv else taps
        per_row += first * 2 * (rows_of_x if pass_ == "forward" else pixels * o)
        if pass_ == "backward_weight":
            per_row += second * 2 * rows_of_x
        else:
            fixed += second * 2 * taps * o
    elif path == "fp16":     # matmul_fp16_chunked: float32 patches and result; col2im in float64
        per_row += {"forward": conv * pixels * taps * 4,
                    "backward_data": conv * (pixels * taps * 12 + image * 8),
                    "backward_weight": conv * pixels * taps * 4}[pass_]
        fixed += taps * o * 4 if pass_ == "forward" else 0
    elif path == "int8":     # the int8 hooks' accumulators (and transposed int8 copies of a linear's operands):
        # int32 sums become the float result in place (dequantize reuse=True), int64 ones stay beside it
        def wide(depth):     # bytes an element of the sums of this depth keeps beside the result (numerics.acc_dtype)
            return 8 if depth * 127 * 127 >= 2 ** 31 else 0
        per_row += {"forward": pixels * o * wide(taps),
                    "backward_data": (image * wide(o * taps // w_shape[-1]) if conv else taps * wide(o)),
                    "backward_weight": 0 if conv else o + taps}[pass_]
        fixed += {"backward_data": 0 if conv else taps * o,
                  "backward_weight": o * taps * wide(batch * pixels)}.get(pass_, 0)
    return per_row, fixed


def _layer_of(attrs: dict) -> str:
    """The product's layer (graph.Product): the operands are (x, w), (err, w), (err, x) by
    pass, as graph.Product lays them out, so a backend sizes its scratch from them."""
    return "conv" if attrs["conv"] else "linear"


def _scalar_int(t: Scaled) -> bool:
    return t.q.dtype in (np.int8, np.int16) and np.ndim(t.scale) == 0


def _int16_product(backend, kind, a, b, attrs) -> np.ndarray:
    """The exact int64 sums of a layer product of int16 operands. Linear layers: matmul_s16,
    whose right operand is K-major (weights as they are for the backward data product, a
    transposed copy of them, small, for the forward; activations as they are for the
    weight gradient). Convolutions: the backend's conv2d_s16, conv2d_bwd_data_s16 and
    conv2d_bwd_weight_s16 (base.py composes them from im2col, matmul_s16 and col2im; the
    CPU builds each image's patches in cache and uses them at once)."""
    c = np.ascontiguousarray
    if not attrs["conv"]:
        if kind == "fwd":
            return backend.matmul_s16(c(_rows(a)), c(b.T))
        if kind == "bwd_data":
            return backend.matmul_s16(a, b)
        return backend.matmul_s16(a, c(_rows(b)), True)    # a_transposed
    s, p = attrs["stride"], attrs["pad"]
    if kind == "fwd":
        return backend.conv2d_s16(c(a), c(b), s, p)
    if kind == "bwd_data":
        return backend.conv2d_bwd_data_s16(c(a), c(b), s, p, attrs["in_hw"])
    return backend.conv2d_bwd_weight_s16(c(a), c(b), s, p, attrs["kernel"])


def _int8_product(backend, kind, a, b, attrs) -> np.ndarray:
    """A layer product's exact sums on the int8 hooks (int32 sums)."""
    if attrs["conv"]:
        s, p = attrs["stride"], attrs["pad"]
        if kind == "fwd":
            return backend.conv2d_s8(a, b, s, p)
        if kind == "bwd_data":
            return backend.conv2d_bwd_data_s8(a, b, s, p, attrs["in_hw"])
        return backend.conv2d_bwd_weight_s8(a, b, s, p, attrs["kernel"])
    if kind == "fwd":
        return backend.gemm_s8(_rows(a), b)
    if kind == "bwd_data":
        return backend.gemm_s8(a, np.ascontiguousarray(b.T))
    return backend.gemm_s8(np.ascontiguousarray(a.T), np.ascontiguousarray(_rows(b).T))


def _float64_product(kind, a, b, attrs):
    if not attrs["conv"]:
        if kind == "fwd":
            return _rows(a) @ b.T
        if kind == "bwd_data":
            return a @ b
        return a.T @ _rows(b)
    s, p = attrs["stride"], attrs["pad"]
    if kind == "fwd":
        o, kh, kw, _ = b.shape
        n, h, w, _ = a.shape
        out = im2col(a, kh, kw, s, p) @ b.reshape(o, -1).T
        return out.reshape(n, out_size(h, kh, s, p), out_size(w, kw, s, p), o)
    if kind == "bwd_data":
        o, kh, kw, c = b.shape
        return col2im(a.reshape(-1, o) @ b.reshape(o, -1), a.shape, (kh, kw, c), s, p, attrs["in_hw"])
    kh, kw = attrs["kernel"]
    o = a.shape[-1]
    return (a.reshape(-1, o).T @ im2col(b, kh, kw, s, p)).reshape(o, kh, kw, b.shape[-1])


# ---------------------------------------------------------------- what a recipe supplies

class Numerics:
    """A recipe's grids and update rule. Override what differs; every method gets the op
    (its `attrs` say which layer and role) and the StepContext. The grids, the product and
    the update take the backend the op is placed on first and call its hooks."""

    prefix = "emulated"
    weight_dtype = "float32"
    bn_grids = fl.BNGrids()
    known_params: dict = {}            # params key -> check(value) -> error text or None

    def check_params(self, recipe, source="recipe"):
        for key, value in recipe.params.items():
            if key not in self.known_params:
                raise ConfigError(source, f"params.{key}",
                                  f"unknown for recipe {recipe.name!r} (known: {', '.join(sorted(self.known_params)) or 'none'})")
            problem = self.known_params[key](value)
            if problem:
                raise ConfigError(source, f"params.{key}", f"{value!r}: {problem}")

    def param(self, recipe, key, default):
        return recipe.params.get(key, default)

    def check_model(self, model, recipe):
        """Extra checks beyond the layer types (raise LoweringError)."""

    #: hooks of the quantizer ops (placement asks backends for them) and of the update op
    quant_hooks: tuple = ("absmax_f", "quantize_f")
    update_hooks: tuple = ("sgd_f32",)
    group_update_hooks: tuple = ("sgd_f32",)   # of an update op with layer_update_extras
    #: bytes an update written in NumPy allocates per weight element beside its results (its
    #: float64 temporaries, measured with tracemalloc); the memory plan counts them
    update_bytes_per_element: int = 0

    # grids
    def quant_weight(self, backend, w, ctx, op) -> Scaled:
        raise NotImplementedError

    def quant_act(self, backend, x, ctx, op) -> Scaled:
        raise NotImplementedError

    def quant_err(self, backend, err, state: list, ctx, op) -> tuple[Scaled, list]:
        raise NotImplementedError

    def product_attrs(self, recipe) -> dict:
        """Attributes of its layers' ops a backend sizes its product's scratch by (FP8: `chunk`)."""
        return {}

    def quant_workspace(self, recipe, role: str, shape) -> tuple[int, int] | None:
        """(bytes per row of the batch, bytes) the quantizer of `role` ("weights", "errors")
        allocates beside its result while it runs, for a tensor of `shape`; the memory plan
        adds it to the op's workspace (memory.planner.op_workspace). None: nothing beyond it."""
        return None

    def kept_by_forward(self, name: str, attrs: dict, x_shape, w_shape) -> dict:
        """Buffers the recipe keeps from a layer's forward product past the op (MLS's patch
        cache): {buffer: (bytes per row, most rows it keeps)}; the memory plan counts them
        like a backend's kept scratch (plan.Plan.scratch_bytes)."""
        return {}

    def product_path(self, a_dtype: str, b_dtype: str) -> str:
        """Which product `product()` runs on operands of these dtypes: "int8" (the int8
        hooks), "int16" (matmul_s16), else "float64" (summed in NumPy)."""
        if a_dtype == b_dtype == "int8":
            return "int8"
        return "int16" if {a_dtype, b_dtype} <= {"int8", "int16"} else "float64"

    def quantized_dtype(self, recipe, role: str) -> str:
        """The element type of the quantized `role` tensors ("weights", "activations",
        "errors") the grids above return: what the memory plan sizes the saved `.wq`, `.xq`,
        `.eq` tensors by. Integer grids: int8 up to 8 bits, int16 up to 16 (_quant._int_dtype)."""
        bits = getattr(recipe.tensors, role).bits
        return "int8" if bits <= 8 else "int16" if bits <= 16 else "int32"

    def product_hooks(self, kind: str) -> tuple:
        """Hooks of a product op: kind is conv, conv_bwd_data, conv_bwd_weight or linear."""
        return _INT8_HOOKS[kind]

    def product(self, backend, kind, a: Scaled, b: Scaled, attrs, ctx) -> np.ndarray:
        return product(backend, kind, a, b, attrs)

    # state
    def err_state(self, layer) -> dict:
        """name suffix -> initial value of per-layer state the error quantizer carries."""
        return {}

    def init_weight(self, layer, rng) -> np.ndarray:
        """He-uniform (He et al. 2015), as FP32."""
        shape = layer.weight_shape
        bound = np.sqrt(6.0 / int(np.prod(shape[1:])))
        return rng.uniform(-bound, bound, shape).astype(np.float32)

    def opt_state(self, param: str, value) -> dict:
        """Optimizer state of one parameter: SGD's velocity."""
        return {f"{param}.v": np.zeros(np.shape(value), np.float32)}

    def update(self, backend, w, grad, state: list, ctx, op):
        """PyTorch's SGD with momentum and weight decay (the float master-weight update)."""
        o = ctx.recipe.optimizer
        lr = o.lr * ctx.recipe.schedule.at("lr_factor", ctx.epoch, 1.0)
        w, v = backend.sgd_f32(w, grad, state[0], lr, o.momentum, o.weight_decay, o.nesterov)
        return w, [v]

    def update_group(self, backend, params: list, ctx, op) -> list:
        """Several parameters of one layer in one update op (`layer_update_extras`):
        [(w, grad, state)] -> [(new w, new state)], each through `update` unless the recipe
        has one hook for them all."""
        return [self.update(backend, w, grad, state, ctx, op) for w, grad, state in params]

    def layer_update_extras(self, b, layer) -> tuple:
        """(param, grad) pairs a layer's weight update op also updates (Octo's compensation
        parameters): one op a layer rather than one a parameter, each op's Python and hook call
        costing about as much as a small parameter's arithmetic."""
        return ()

    # extra layers around a product (Octo's compensation layer)
    def after_forward(self, engine, b, layer, out) -> str:
        return out

    def before_backward(self, engine, b, layer, err) -> str:
        return err

    def extra_init(self, layer, rng) -> dict:
        return {}

    def loss(self, b, logits, labels):
        return fp32.loss(b, logits, labels)

    extra_ops: dict = {}


# ---------------------------------------------------------------- the engine

class Emulated:
    """Builds the recipe-module contract from a Numerics."""

    def __init__(self, numerics: Numerics):
        self.n = numerics
        p = numerics.prefix
        self.OPS = {**fp32.OPS, **fl.make_ops(p, numerics.bn_grids), **numerics.extra_ops,
                    f"{p}.quant_weight": self.quant_weight, f"{p}.quant_act": self.quant_act,
                    f"{p}.quant_err": self.quant_err, f"{p}.product": self.product, f"{p}.update": self.update}

    # ------------------------------------------------------------ contract
    def check_model(self, model, recipe):
        for layer in model.layers:
            if not isinstance(layer, LOWERABLE):
                raise LoweringError(f"recipe {recipe.name!r} cannot lower layer {layer.name!r} "
                                    f"({type(layer).__name__})")
        self.n.check_params(recipe)
        self.n.check_model(model, recipe)

    def forward(self, b, layer, x, shape):
        p = self.n.prefix
        if isinstance(layer, (Conv2d, Linear)):
            return self._forward_product(b, layer, x, shape)
        out = fl.forward(b, layer, x, shape, p, b.training)
        return out if out is not None else fp32.forward(b, layer, x, shape)

    def loss(self, b, logits, labels):
        return self.n.loss(b, logits, labels)

    def backward(self, b, layer, err, needs_input_error):
        p = self.n.prefix
        if isinstance(layer, (Conv2d, Linear)):
            return self._backward_product(b, layer, err, needs_input_error)
        if isinstance(layer, BatchNorm2d):
            err_in, grads = fl.backward_bn(b, layer, err, needs_input_error, p)
            for param, grad in grads:
                self.emit_update(b, layer.name, param, grad)
            return err_in
        if isinstance(layer, GlobalAvgPool):
            return fl.backward_avgpool(b, layer, err, p)
        return fp32.backward(b, layer, err, needs_input_error)

    def join_errors(self, b, name, errs):
        return fl.join_errors(b, name, errs, self.n.prefix)

    def init_params(self, model, recipe, rng: np.random.Generator) -> dict:
        state = {}
        for layer in model.layers:
            if isinstance(layer, (Conv2d, Linear)):
                w = self.n.init_weight(layer, rng)
                state[f"{layer.name}.w"] = w
                state.update(self.n.opt_state(f"{layer.name}.w", _plain(w)))
                state.update({f"{layer.name}.{k}": v for k, v in self.n.err_state(layer).items()})
                if has_bias(layer):   # a float bias, zero, drawing nothing; updated by the recipe's rule
                    state[f"{layer.name}.b"] = np.zeros(layer.bias_shape, np.float32)
                    state.update(self.n.opt_state(f"{layer.name}.b", state[f"{layer.name}.b"]))
            elif isinstance(layer, BatchNorm2d):
                bn = fl.init_bn(layer)
                state.update(bn)
                for param in fl.bn_state_names(layer.name)[:2]:
                    state.update(self.n.opt_state(param, bn[param]))
            state.update(self.n.extra_init(layer, rng))
        return state

    # ------------------------------------------------------------ lowering helpers
    def emit_update(self, b, layer_name, param, grad, extra_params=()):
        """The update op of `param` and of the (param, grad) pairs `extra_params` with it:
        inputs (param, grad, *state) and outputs (param, *state) for each, in turn."""
        inputs, outputs, extra = [], [], 0
        for p, g in ((param, grad), *extra_params):
            spec = b.tensors.get(p)
            shape = spec.shape if spec else b.tensors[g].shape
            names = tuple(self.n.opt_state(p, np.zeros(shape, np.float32)))
            for name in names:
                b.tensor(name, shape, "float32", "state")
            inputs += [p, g, *names]
            outputs += [p, *names]
            extra += int(np.prod(shape)) * self.n.update_bytes_per_element   # its float64 temporaries
        grouped = {"update_params": 1 + len(extra_params)} if extra_params else {}
        b.op(f"{param}.update", f"{self.n.prefix}.update", layer_name, "update", tuple(inputs), tuple(outputs),
             self.n.group_update_hooks if extra_params else self.n.update_hooks,
             **({"workspace": (0, extra)} if extra else {}), **grouped)

    def _attrs(self, b, layer, x):
        position, extra = _position(b, layer), self.n.product_attrs(b.recipe)
        if isinstance(layer, Conv2d):
            return dict(conv=True, stride=layer.stride, pad=layer.padding, in_hw=b.tensors[x].shape[1:3],
                        kernel=(layer.kernel, layer.kernel), position=position, **extra)
        return dict(conv=False, position=position, **extra)

    def _forward_product(self, b, layer, x, shape):
        p, name = self.n.prefix, layer.name
        w = b.param(f"{name}.w", layer.weight_shape, self.n.weight_dtype)
        attrs = self._attrs(b, layer, x)
        # not "saved": no row per sample, even when the layer has as many outputs as the batch rows
        wq = b.tensor(f"{name}.wq", layer.weight_shape, self.n.quantized_dtype(b.recipe, "weights"), "quantized_weight")
        xq = b.tensor(f"{name}.xq", b.tensors[x].shape, self.n.quantized_dtype(b.recipe, "activations"), "saved")
        b.op(f"{name}.quant_w", f"{p}.quant_weight", name, "forward", (w,), (wq,), self.n.quant_hooks,
             **self._quant_workspace(b.recipe, "weights", layer.weight_shape), **attrs)
        # a quantizer's scale is the whole tensor's range: under micro-batching it runs whole
        b.op(f"{name}.quant_x", f"{p}.quant_act", name, "forward", (x,), (xq,), self.n.quant_hooks, rows="coupled",
             **attrs)
        out = b.tensor(f"{name}.out", shape, "float32", "activation")
        macs = int(np.prod(shape)) * int(np.prod(layer.weight_shape[1:]))
        hooks = self.n.product_hooks("conv" if attrs["conv"] else "linear")
        bias = fp32.bias_param(b, layer)
        path = self.n.product_path(b.tensors[xq].dtype, b.tensors[wq].dtype)
        b.op(f"{name}.fwd", f"{p}.product", name, "forward", (xq, wq, *bias), (out,), hooks, macs,
             role="fwd", product=(_layer_of(attrs), "forward"),
             workspace=product_workspace(path, "forward", attrs, b.tensors[x].shape, layer.weight_shape, bool(bias),
                                         (b.tensors[xq].dtype, b.tensors[wq].dtype)),
             **self._keeps(name, attrs, b.tensors[x].shape, layer.weight_shape), **attrs)
        return self.n.after_forward(self, b, layer, out)

    def _quant_workspace(self, recipe, role, shape) -> dict:
        counted = self.n.quant_workspace(recipe, role, shape)
        return {"workspace": counted} if counted else {}

    def _keeps(self, name, attrs, x_shape, w_shape) -> dict:
        kept = self.n.kept_by_forward(name, attrs, x_shape, w_shape)
        return {"keeps": kept} if kept else {}

    def _backward_product(self, b, layer, err, needs_input_error):
        p, name = self.n.prefix, layer.name
        err = self.n.before_backward(self, b, layer, err)
        x, _ = b.layer_io[name]
        attrs = self._attrs(b, layer, x)
        state = tuple(f"{name}.{k}" for k in self.n.err_state(layer))
        for s, value in zip(state, self.n.err_state(layer).values()):
            b.tensor(s, np.shape(value), str(np.asarray(value).dtype), "state")
        eq = b.tensor(f"{name}.eq", b.tensors[err].shape, self.n.quantized_dtype(b.recipe, "errors"), "saved")
        b.op(f"{name}.quant_err", f"{p}.quant_err", name, "backward", (err, *state), (eq, *state), self.n.quant_hooks,
             rows="coupled", **self._quant_workspace(b.recipe, "errors", b.tensors[err].shape), **attrs)
        macs = b.find(f"{name}.fwd").macs
        conv = attrs["conv"]
        err_in = None
        if needs_input_error:
            err_in = b.tensor(f"err.{name}", b.tensors[x].shape, "float32", "error")
            hooks = self.n.product_hooks("conv_bwd_data" if conv else "linear")
            path = self.n.product_path(b.tensors[eq].dtype, b.tensors[f"{name}.wq"].dtype)
            b.op(f"{name}.bwd_data", f"{p}.product", name, "backward", (eq, f"{name}.wq"), (err_in,), hooks, macs,
                 role="bwd_data", product=(_layer_of(attrs), "backward_data"),
                 workspace=product_workspace(path, "backward_data", attrs, b.tensors[x].shape, layer.weight_shape,
                                             dtypes=(b.tensors[eq].dtype, b.tensors[f"{name}.wq"].dtype)),
                 **attrs)
        grad = b.tensor(f"{name}.grad", layer.weight_shape, "float32", "grad")
        hooks = self.n.product_hooks("conv_bwd_weight" if conv else "linear")
        path = self.n.product_path(b.tensors[eq].dtype, b.tensors[f"{name}.xq"].dtype)
        b.op(f"{name}.bwd_weight", f"{p}.product", name, "backward", (eq, f"{name}.xq"), (grad,), hooks, macs,
             role="bwd_weight", product=(_layer_of(attrs), "backward_weight"),
             workspace=product_workspace(path, "backward_weight", attrs, b.tensors[x].shape, layer.weight_shape,
                                         dtypes=(b.tensors[eq].dtype, b.tensors[f"{name}.xq"].dtype)),
             **attrs)
        self.emit_update(b, name, f"{name}.w", grad, self.n.layer_update_extras(b, layer))
        if has_bias(layer):   # float, from the unquantized error: the bias is added after the product
            self.emit_update(b, name, f"{name}.b", fp32.bias_grad_op(b, layer, err))
        return err_in

    # ------------------------------------------------------------ op functions (backend, op, env, ctx)
    def quant_weight(self, backend, op, env, ctx) -> dict:
        return {op.outputs[0]: self.n.quant_weight(backend, env[op.inputs[0]], ctx, op)}

    def quant_act(self, backend, op, env, ctx) -> dict:
        return {op.outputs[0]: self.n.quant_act(backend, env[op.inputs[0]], ctx, op)}

    def quant_err(self, backend, op, env, ctx) -> dict:
        eq, state = self.n.quant_err(backend, env[op.inputs[0]], [env[s] for s in op.inputs[1:]], ctx, op)
        return dict(zip(op.outputs, (eq, *state)))

    def product(self, backend, op, env, ctx) -> dict:
        a, w = env[op.inputs[0]], env[op.inputs[1]]
        y = self.n.product(backend, op.attrs["role"], a, w, op.attrs, ctx)
        return {op.outputs[0]: fp32.with_bias(y, op, env)}

    def update(self, backend, op, env, ctx) -> dict:
        count = op.attrs.get("update_params", 1)
        if count == 1:
            w, grad = env[op.inputs[0]], env[op.inputs[1]]
            w, state = self.n.update(backend, w, grad, [env[s] for s in op.inputs[2:]], ctx, op)
            return dict(zip(op.outputs, (w, *state)))
        per = len(op.inputs) // count    # (param, grad, *state) each: emit_update's layout
        groups = [op.inputs[i * per:(i + 1) * per] for i in range(count)]
        done = self.n.update_group(backend, [(env[g[0]], env[g[1]], [env[s] for s in g[2:]]) for g in groups],
                                   ctx, op)
        out = {}
        for g, (w, state) in zip(groups, done):
            out.update(zip((g[0], *g[2:]), (w, *state)))
        return out


def _plain(w):
    """The float value of a stored weight (WAGEUBN stores a QTensor accumulator)."""
    return w.dequantize() if hasattr(w, "dequantize") else w


def _position(b, layer) -> str:
    """first | last | middle among the model's parametric layers (papers keep these apart)."""
    parametric = b.model.parametric() if b.model is not None else []
    if parametric and layer.name == parametric[0].name:
        return "first"
    if parametric and layer.name == parametric[-1].name:
        return "last"
    return "middle"


def group_for(channels: int, group_size: int) -> int:
    """The MLS group along `channels`: group_size when it divides them, else their gcd."""
    return math.gcd(channels, group_size)


def module_contract(engine: Emulated) -> tuple:
    """The names a recipe module exports (see algorithms/__init__.py), in this order:
    ACTIVATION_DTYPE, check_recipe, check_model, forward, loss, backward, join_errors, OPS,
    init_params, prepare_input, logits_to_float."""
    return ("float32", engine.n.check_params, engine.check_model, engine.forward, engine.loss, engine.backward,
            engine.join_errors, engine.OPS, engine.init_params, fp32.prepare_input, fp32.logits_to_float)
