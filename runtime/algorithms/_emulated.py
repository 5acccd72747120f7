"""The shared lowering of the emulated recipes (Octo, WAGEUBN, AFP, MLS, FP8).

These recipes keep float tensors between ops and put every operand of a product on the
recipe's number grid first, exactly (the way their papers evaluate them). A conv or
linear layer lowers to:

    forward   quant_weight (w -> wq), quant_act (x -> xq), fwd (xq x wq -> out)
    backward  quant_err (err -> eq), bwd_data (eq x wq -> err_in), bwd_weight (eq x xq -> grad)
    update    update (w, grad, optimizer state -> w, optimizer state)

A layer with a bias adds it (float) to the product's output, and its gradient (the float
error summed over rows) takes the recipe's update like a weight.

A recipe module supplies a `Numerics` subclass (_recipe_numerics.py: its grids, products,
update rule and extra state) and gets the module-level contract of `algorithms/__init__.py`
back from `Emulated` (here: the lowering and the op functions); the products themselves
are _products.py. Every op runs on backend hooks, so placement puts it where it really runs
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

from ..nn import Add, BatchNorm2d, Conv2d, GlobalAvgPool, Linear, has_bias
from . import _branch_layers as branch
from . import _float_layers as fl
from . import fp32
from ._float_products import bias_grad_op, bias_param, with_bias
from ._products import dense_scaled, layer_of, product_workspace
from ._recipe_numerics import Numerics
from ._support import check_layers, entry

# ---------------------------------------------------------------- the engine


class Emulated:
    """Builds the recipe-module contract from a Numerics."""

    def __init__(self, numerics: Numerics):
        self.n = numerics
        p = numerics.prefix
        self.OPS = {
            **fp32.OPS,
            **fl.make_ops(p, numerics.bn_grids),
            **numerics.extra_ops,
            f"{p}.quant_weight": self.quant_weight,
            f"{p}.quant_act": self.quant_act,
            f"{p}.quant_err": self.quant_err,
            f"{p}.product": self.product,
            f"{p}.update": self.update,
        }
        # layer kind -> the method emitting its ops (algorithms/_support.py): FP32's, but the
        # products, batch norm (on the recipe's grids), residual add and global average pool
        # under the recipe's own op kinds
        self.FORWARD = {
            **fp32.FORWARD,
            Conv2d: self._forward_product,
            Linear: self._forward_product,
            BatchNorm2d: self._forward_bn,
            Add: self._forward_add,
            GlobalAvgPool: self._forward_global_pool,
        }
        self.BACKWARD = {
            **fp32.BACKWARD,
            Conv2d: self._backward_product,
            Linear: self._backward_product,
            BatchNorm2d: self._backward_bn,
            GlobalAvgPool: self._backward_global_pool,
        }

    # ------------------------------------------------------------ contract
    def check_model(self, model, recipe):
        check_layers(model, recipe, self.FORWARD)
        self.n.check_params(recipe)
        self.n.check_model(model, recipe)

    def forward(self, b, layer, x, shape):
        return entry(self.FORWARD, layer, b.recipe)(b, layer, x, shape)

    def loss(self, b, logits, labels):
        return self.n.loss(b, logits, labels)

    def backward(self, b, layer, err, needs_input_error):
        return entry(self.BACKWARD, layer, b.recipe)(b, layer, err, needs_input_error)

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
                if has_bias(layer):  # a float bias, zero, drawing nothing; updated by the recipe's rule
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
            extra += int(np.prod(shape)) * self.n.update_bytes_per_element  # its float64 temporaries
        grouped = {"update_params": 1 + len(extra_params)} if extra_params else {}
        b.op(
            f"{param}.update",
            f"{self.n.prefix}.update",
            layer_name,
            "update",
            tuple(inputs),
            tuple(outputs),
            self.n.group_update_hooks if extra_params else self.n.update_hooks,
            **({"workspace": (0, extra)} if extra else {}),
            **grouped,
        )

    def _forward_bn(self, b, layer, x, shape):
        return fl.forward_bn(b, layer, x, shape, self.n.prefix, b.training, self.n.bn_grids)

    def _backward_bn(self, b, layer, err, needs_input_error):
        err_in, grads = fl.backward_bn(b, layer, err, needs_input_error, self.n.prefix, self.n.bn_grids)
        for param, grad in grads:
            self.emit_update(b, layer.name, param, grad)
        return err_in

    def _forward_add(self, b, layer, x, shape):
        return fl.forward_add(b, layer, x, shape, self.n.prefix)

    def _forward_global_pool(self, b, layer, x, shape):
        return fl.forward_avgpool(b, layer, x, shape, self.n.prefix)

    def _backward_global_pool(self, b, layer, err, needs_input_error):
        return fl.backward_avgpool(b, layer, err, self.n.prefix)

    def _attrs(self, b, layer, x):
        position, extra = _position(b, layer), self.n.product_attrs(b.recipe)
        if isinstance(layer, Conv2d):
            grouped = (
                dict(dense=(layer.groups, layer.dilation))
                if _dense(layer)
                else dict(groups=layer.groups, depthwise=layer.depthwise)
                if layer.groups > 1
                else {}
            )
            return dict(
                conv=True,
                stride=layer.stride,
                pad=layer.padding,
                in_hw=b.tensors[x].shape[1:3],
                kernel=(layer.span, layer.span),
                position=position,
                **grouped,
                **extra,
            )
        return dict(conv=False, position=position, **extra)

    def _forward_product(self, b, layer, x, shape):
        p, name = self.n.prefix, layer.name
        w = b.param(f"{name}.w", layer.weight_shape, self.n.weight_dtype)
        attrs = self._attrs(b, layer, x)
        # not "saved": no row per sample, even when the layer has as many outputs as the batch rows
        wq = b.tensor(
            f"{name}.wq", _product_weight_shape(layer), self.n.quantized_dtype(b.recipe, "weights"), "quantized_weight"
        )
        xq = b.tensor(f"{name}.xq", b.tensors[x].shape, self.n.quantized_dtype(b.recipe, "activations"), "saved")
        b.op(
            f"{name}.quant_w",
            f"{p}.quant_weight",
            name,
            "forward",
            (w,),
            (wq,),
            self.n.quant_hooks,
            **self._quant_workspace(b.recipe, "weights", layer.weight_shape),
            **attrs,
        )
        # a quantizer's scale is the whole tensor's range: under micro-batching it runs whole
        b.op(
            f"{name}.quant_x",
            f"{p}.quant_act",
            name,
            "forward",
            (x,),
            (xq,),
            self.n.quant_hooks,
            rows="coupled",
            **attrs,
        )
        out = b.tensor(f"{name}.out", shape, "float32", "activation")
        macs = int(np.prod(shape)) * int(np.prod(layer.weight_shape[1:]))
        hooks = self.n.product_hooks(_hook_kind(attrs, "conv") if attrs["conv"] else "linear")
        bias = bias_param(b, layer)
        path = self.n.product_path(b.tensors[xq].dtype, b.tensors[wq].dtype)
        b.op(
            f"{name}.fwd",
            f"{p}.product",
            name,
            "forward",
            (xq, wq, *bias),
            (out,),
            hooks,
            macs,
            role="fwd",
            product=(layer_of(attrs), "forward"),
            workspace=product_workspace(
                path,
                "forward",
                attrs,
                b.tensors[x].shape,
                b.tensors[wq].shape,
                bool(bias),
                (b.tensors[xq].dtype, b.tensors[wq].dtype),
            ),
            **self._keeps(name, attrs, b.tensors[x].shape, b.tensors[wq].shape),
            **attrs,
        )
        return self.n.after_forward(self, b, layer, out)

    def _quant_workspace(self, recipe, role, shape) -> dict:
        counted = self.n.quant_workspace(recipe, role, shape)
        return {"workspace": counted} if counted else {}

    def _keeps(self, name, attrs, x_shape, w_shape) -> dict:
        kept = self.n.kept_by_forward(name, attrs, x_shape, w_shape)
        return {"keeps": kept} if kept else {}

    def _backward_product(self, b, layer, err, needs_input_error):
        name = layer.name
        err = self.n.before_backward(self, b, layer, err)
        x, _ = b.layer_io[name]
        attrs = self._attrs(b, layer, x)
        eq = self._quantize_error(b, layer, err, attrs)
        err_in = None
        if needs_input_error:
            err_in = b.tensor(f"err.{name}", b.tensors[x].shape, "float32", "error")
            self._backward_pass(b, layer, "backward_data", (eq, f"{name}.wq"), err_in, attrs, x)
        grad = b.tensor(f"{name}.grad", layer.weight_shape, "float32", "grad")
        self._backward_pass(b, layer, "backward_weight", (eq, f"{name}.xq"), grad, attrs, x)
        self.emit_update(b, name, f"{name}.w", grad, self.n.layer_update_extras(b, layer))
        if has_bias(layer):  # float, from the unquantized error: the bias is added after the product
            self.emit_update(b, name, f"{name}.b", bias_grad_op(b, layer, err))
        return err_in

    def _quantize_error(self, b, layer, err, attrs) -> str:
        """The quant_err op putting `err` on the recipe's error grid (with its error state); eq."""
        name = layer.name
        state = tuple(f"{name}.{k}" for k in self.n.err_state(layer))
        for s, value in zip(state, self.n.err_state(layer).values()):
            b.tensor(s, np.shape(value), str(np.asarray(value).dtype), "state")
        eq = b.tensor(f"{name}.eq", b.tensors[err].shape, self.n.quantized_dtype(b.recipe, "errors"), "saved")
        b.op(
            f"{name}.quant_err",
            f"{self.n.prefix}.quant_err",
            name,
            "backward",
            (err, *state),
            (eq, *state),
            self.n.quant_hooks,
            rows="coupled",
            **self._quant_workspace(b.recipe, "errors", b.tensors[err].shape),
            **attrs,
        )
        return eq

    def _backward_pass(self, b, layer, pass_, inputs, output, attrs, x) -> None:
        """One backward product of the quantized error: `pass_` "backward_data" (eq x wq -> the
        input's error) or "backward_weight" (eq x xq -> the weight gradient)."""
        role = _ROLES[pass_]
        hooks = self.n.product_hooks(_hook_kind(attrs, f"conv_{role}") if attrs["conv"] else "linear")
        dtypes = tuple(b.tensors[t].dtype for t in inputs)
        b.op(
            f"{layer.name}.{role}",
            f"{self.n.prefix}.product",
            layer.name,
            "backward",
            inputs,
            (output,),
            hooks,
            b.find(f"{layer.name}.fwd").macs,
            role=role,
            product=(layer_of(attrs), pass_),
            workspace=product_workspace(
                self.n.product_path(*dtypes),
                pass_,
                attrs,
                b.tensors[x].shape,
                _product_weight_shape(layer),
                dtypes=dtypes,
            ),
            **attrs,
        )

    # ------------------------------------------------------------ op functions (backend, op, env, ctx)
    def quant_weight(self, backend, op, env, ctx) -> dict:
        wq = self.n.quant_weight(backend, env[op.inputs[0]], ctx, op)
        if "dense" in op.attrs:  # the dense product's zero-filled weight, quantized as the layer's own
            wq = dense_scaled(wq, *op.attrs["dense"])
        return {op.outputs[0]: wq}

    def quant_act(self, backend, op, env, ctx) -> dict:
        return {op.outputs[0]: self.n.quant_act(backend, env[op.inputs[0]], ctx, op)}

    def quant_err(self, backend, op, env, ctx) -> dict:
        eq, state = self.n.quant_err(backend, env[op.inputs[0]], [env[s] for s in op.inputs[1:]], ctx, op)
        return dict(zip(op.outputs, (eq, *state)))

    def product(self, backend, op, env, ctx) -> dict:
        a, w = env[op.inputs[0]], env[op.inputs[1]]
        y = self.n.product(backend, op.attrs["role"], a, w, op.attrs, ctx)
        if op.attrs["role"] == "bwd_weight" and "dense" in op.attrs:  # the layer's own taps of the dense gradient
            y = branch.grouped_part(y, *op.attrs["dense"])
        return {op.outputs[0]: with_bias(backend, y, op, env)}

    def update(self, backend, op, env, ctx) -> dict:
        count = op.attrs.get("update_params", 1)
        if count == 1:
            w, grad = env[op.inputs[0]], env[op.inputs[1]]
            w, state = self.n.update(backend, w, grad, [env[s] for s in op.inputs[2:]], ctx, op)
            return dict(zip(op.outputs, (w, *state)))
        per = len(op.inputs) // count  # (param, grad, *state) each: emit_update's layout
        groups = [op.inputs[i * per : (i + 1) * per] for i in range(count)]
        done = self.n.update_group(backend, [(env[g[0]], env[g[1]], [env[s] for s in g[2:]]) for g in groups], ctx, op)
        out = {}
        for g, (w, state) in zip(groups, done):
            out.update(zip((g[0], *g[2:]), (w, *state)))
        return out


_ROLES = {"backward_data": "bwd_data", "backward_weight": "bwd_weight"}  # a backward pass -> its op's role


def _dense(layer) -> bool:
    """A dilated conv: its products run dense on a zero-filled weight (_branch_layers.dense_weight;
    every product hook and grid of these recipes takes it). An undilated grouped or depthwise
    conv keeps its own weight: its products run per group or on the depthwise hooks
    (_products.per_group, attrs `groups`)."""
    return isinstance(layer, Conv2d) and layer.dilation > 1


def _hook_kind(attrs, kind: str) -> str:
    """The product_hooks kind of a conv product: a depthwise one's are dwconv*."""
    return "dw" + kind if attrs.get("depthwise") else kind


def _product_weight_shape(layer) -> tuple:
    if not _dense(layer):
        return layer.weight_shape
    return (layer.out_channels, layer.span, layer.span, layer.in_channels)


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
    return (
        "float32",
        engine.n.check_params,
        engine.check_model,
        engine.forward,
        engine.loss,
        engine.backward,
        engine.join_errors,
        engine.OPS,
        engine.init_params,
        fp32.prepare_input,
        fp32.logits_to_float,
    )
