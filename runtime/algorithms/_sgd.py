"""FP32's SGD for float parameters (PyTorch's update rule: momentum, weight decay, Nesterov):
the update op a lowering emits for a weight, a bias or a batch norm's gamma and beta, and the
op function that runs it (`fp32.sgd` -> the `sgd_f32` hook). FP32 updates every parameter
this way; NITI its float ones (batch norm, biases: int_mixed.py). Not a recipe."""

from __future__ import annotations


def emit_weight_sgd(b, layer, grad) -> None:
    """The update of `layer`'s weight `<layer>.w` by `grad`, with the velocity `<layer>.v` its
    forward lowering made."""
    w, v = f"{layer.name}.w", f"{layer.name}.v"
    b.op(f"{layer.name}.update", "fp32.sgd", layer.name, "update", (w, grad, v), (w, v), ("sgd_f32",))


def emit_sgd(b, layer_name, param, grad):
    """PyTorch's SGD update of `param` by `grad`, with its velocity (`param`.v, a state tensor).
    Under NITI's integer loss the errors are per sample (its softmax gradient has no 1/N), so a
    float parameter's gradient is the batch's sum: the rate is divided by the batch size, which
    makes it PyTorch's rate on a mean loss."""
    velocity = b.tensor(f"{param}.v", b.tensors[param].shape, "float32", "state")
    summed = b.recipe.loss.kind == "niti_int_ce"
    b.op(
        f"{param}.update",
        "fp32.sgd",
        layer_name,
        "update",
        (param, grad, velocity),
        (param, velocity),
        ("sgd_f32",),
        lr_divisor=b.batch if summed else 1,
    )


def sgd(backend, op, env, ctx) -> dict:
    """PyTorch's SGD: g += wd * w; v = momentum * v + g; w -= lr * (g + momentum * v if nesterov else v)."""
    w, grad, v = env[op.inputs[0]], env[op.inputs[1]], env[op.inputs[2]]
    o = ctx.recipe.optimizer
    lr = o.lr * ctx.lr_factor() / op.attrs.get("lr_divisor", 1)
    return dict(zip(op.outputs, backend.sgd_f32(w, grad, v, lr, o.momentum, o.weight_decay, o.nesterov)))
