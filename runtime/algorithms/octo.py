"""Octo: INT8 training with loss-aware compensation and backward quantization (Zhou et
al., "Octo: INT8 Training with Loss-aware Compensation and Backward Quantization for
Tiny On-device Learning", USENIX ATC 2021).

- Forward: weights and activations are int8 with one scale per tensor (max|x| / 127,
  round to nearest); the products run on the int8 hooks.
- Loss-aware compensation (LAC): after every quantized conv/linear a compensation layer
  y = (1 + gamma) * z + beta, per output channel, gamma = beta = 0 at the start. Its
  parameters are trained by the loss like any weight, so they absorb the systematic part
  of the quantization error of the product they follow.
- Backward quantization with parameterized range clipping (PRC): each layer's incoming
  error is int8 over [-a * max|e|, a * max|e|]. The clip ratio `a` is a per-layer
  parameter: every step the ratio with the least squared quantization error is found
  on a grid and `a` moves toward it by `prc_momentum` (an exponential average, so one
  odd batch does not swing the range).
- Float32 master weights, SGD with momentum (the paper's on-device trainer keeps them).

Emulated: float tensors between ops with exact quantize/dequantize, as the paper
evaluates; the int8 products are real int8 products on whatever backend runs them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..nn import Conv2d, Linear
from ._emulated import Emulated, module_contract
from ._products import int8_product, product
from ._quant import PRC_CANDIDATES, Scaled, quantize_int
from ._recipe_numerics import Numerics


def _unit_interval(value):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    return None if ok else "must be a number in [0, 1]"


def _flag(value):
    return None if isinstance(value, bool) else "must be true or false"


def _int_fmt(backend, x, fmt, rng=None):
    return quantize_int(backend, x, fmt.bits, fmt.scale, fmt.rounding if fmt.rounding != "none" else "round", rng)


class OctoNumerics(Numerics):
    prefix = "octo"
    known_params = {"prc_momentum": _unit_interval, "compensation": _flag}

    def quant_weight(self, backend, w, ctx, op):
        return _int_fmt(backend, w, ctx.recipe.tensors.weights, ctx.rng(op))

    def quant_act(self, backend, x, ctx, op):
        return _int_fmt(backend, x, ctx.recipe.tensors.activations, ctx.rng(op))

    def err_state(self, layer):
        return {"prc_ratio": np.array(1.0, np.float32)}

    quant_hooks = ("absmax_f", "quantize_f", "prc_quantize")

    def quant_err(self, backend, err, state, ctx, op):
        fmt = ctx.recipe.tensors.errors
        momentum = float(self.param(ctx.recipe, "prc_momentum", 0.1))
        # range, ratio search and quantizer in one hook: one pass finds the error's nonzero
        # values (most are zero behind ReLU and max-pool), the others run over those
        q, step, ratio = backend.prc_quantize(
            np.asarray(err, np.float32),
            float(state[0]),
            momentum,
            PRC_CANDIDATES,
            fmt.bits,
            fmt.rounding if fmt.rounding != "none" else "round",
            ctx.rng(op),
        )
        return Scaled(q, step), [np.array(ratio, np.float32)]

    # ------------------------------------------------------------ the compensation layer
    def _compensated(self, b):
        return bool(self.param(b.recipe, "compensation", True))

    def after_forward(self, engine, b, layer, out):
        if not self._compensated(b):
            return out
        scale, shift = compensation_names(layer.name)
        channels = b.tensors[out].shape[-1]
        b.param(scale, (channels,), "float32")
        b.param(shift, (channels,), "float32")
        comp = b.tensor(f"{layer.name}.comp.out", b.tensors[out].shape, "float32", "activation")
        product = b.ops[-1]
        if product.name == f"{layer.name}.fwd" and len(product.inputs) == 2:
            # no bias between them: the product op applies the layer as its sums become floats,
            # one op and one pass fewer (the raw product stays an output: comp_bwd reads it)
            b.ops[-1] = dataclasses.replace(
                product, kind="octo.product_comp", inputs=(*product.inputs, scale, shift), outputs=(out, comp)
            )
            return comp
        b.op(
            f"{layer.name}.comp_fwd",
            "octo.comp_fwd",
            layer.name,
            "forward",
            (out, scale, shift),
            (comp,),
            ("compensation_fwd",),
        )
        return comp

    def before_backward(self, engine, b, layer, err):
        if not self._compensated(b):
            return err
        scale, shift = compensation_names(layer.name)
        raw = f"{layer.name}.out"
        err_raw = b.tensor(f"err.{layer.name}.comp", b.tensors[raw].shape, "float32", "error")
        g_scale = b.tensor(f"{scale}.grad", b.tensors[scale].shape, "float32", "grad")
        g_shift = b.tensor(f"{shift}.grad", b.tensors[shift].shape, "float32", "grad")
        b.op(
            f"{layer.name}.comp_bwd",
            "octo.comp_bwd",
            layer.name,
            "backward",
            (err, raw, scale),
            (err_raw, g_scale, g_shift),
            ("compensation_bwd",),
        )
        return err_raw

    def layer_update_extras(self, b, layer):
        """The compensation parameters go with the layer's weight update (their gradients
        come from comp_bwd above): one update op and one hook call a layer, not three."""
        if not self._compensated(b):
            return ()
        return tuple((name, f"{name}.grad") for name in compensation_names(layer.name))

    group_update_hooks = ("sgd_f32_group",)

    def update_group(self, backend, params, ctx, op):
        """The layer's weight and compensation parameters, SGD with momentum
        each (the same arithmetic as `update`), in one call."""
        o = ctx.recipe.optimizer
        lr = o.lr * ctx.lr_factor()
        done = backend.sgd_f32_group(
            [(w, grad, state[0]) for w, grad, state in params], lr, o.momentum, o.weight_decay, o.nesterov
        )
        return [(w, [v]) for w, v in done]

    def extra_init(self, layer, rng):
        if not isinstance(layer, (Conv2d, Linear)):
            return {}
        channels = layer.weight_shape[0]
        state = {}
        for name in compensation_names(layer.name):
            state[name] = np.zeros(channels, np.float32)
            state.update(self.opt_state(name, state[name]))
        return state


def compensation_names(layer_name):
    return f"{layer_name}.comp_scale", f"{layer_name}.comp_shift"


def comp_fwd(backend, op, env, ctx) -> dict:
    """The compensation layer of a product with a bias between them: y = z * (1 + scale) + shift."""
    return {op.outputs[0]: backend.compensation_fwd(*(env[t] for t in op.inputs))}


def comp_bwd(backend, op, env, ctx) -> dict:
    """(error of the raw product, scale's gradient, shift's gradient)."""
    return dict(zip(op.outputs, backend.compensation_bwd(*(env[t] for t in op.inputs))))


def product_comp(backend, op, env, ctx) -> dict:
    """A layer's product and its compensation layer: (raw product, compensated),
    the latter through a ReLU when the op took in the ReLU that read it (attrs["relu"],
    algorithms/_fusions.py)."""
    a, w, scale, shift = (env[t] for t in op.inputs)
    kind, attrs = op.attrs["role"], op.attrs
    relu = attrs.get("relu", False)
    if a.scalar_int8 and w.scalar_int8:  # one pass turns the sums into both floats
        acc = int8_product(backend, kind, a.q, w.q, attrs)
        z, y = backend.dequantize_compensate(acc, float(a.scale) * float(w.scale), scale, shift, True, relu)
    else:
        z = product(backend, kind, a, w, attrs)
        y = backend.compensation_fwd(z, scale, shift)
        if relu:
            y = backend.relu_f32(y)
    return {op.outputs[0]: z, op.outputs[1]: y}


def pool_comp_bwd(backend, op, env, ctx) -> dict:
    """A max-pool's backward folded into the compensation's (algorithms/_fusions.py): inputs
    (err, argmax, z, scale[, gate]), outputs comp_bwd's."""
    err, argmax, z, scale, *gate = (env[t] for t in op.inputs)
    return dict(
        zip(
            op.outputs,
            backend.pool_compensation_bwd(
                err, gate[0] if gate else None, argmax, op.attrs["kernel"], op.attrs["stride"], z, scale
            ),
        )
    )


OctoNumerics.extra_ops = {
    "octo.comp_fwd": comp_fwd,
    "octo.product_comp": product_comp,
    "octo.comp_bwd": comp_bwd,
    "octo.pool_comp_bwd": pool_comp_bwd,
}
ENGINE = Emulated(OctoNumerics())
(
    ACTIVATION_DTYPE,
    check_recipe,
    check_model,
    forward,
    loss,
    backward,
    join_errors,
    OPS,
    init_params,
    prepare_input,
    logits_to_float,
) = module_contract(ENGINE)
