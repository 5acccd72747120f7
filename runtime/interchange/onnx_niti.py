"""NITI's integer evaluation written in ONNX operators (export format `onnx-niti`).

NITI keeps every activation as int8 with a power-of-two exponent chosen from the range
of the whole batch after each conv and linear layer (numerics.activation_shift: shift
s = max(ceil(log2(max|acc|)) - 7, 0), round half away from zero, clip to +-127). A float
graph with the dequantized weights skips that rounding, so its top-1 answers differ from
dsptrain's on a few per cent of the samples near a tie. This form carries the rounding:
each conv/linear output y (a float holding acc * 2**E exactly, E the input's and the
weight's exponents) is followed by

    b = ceil(log2(max|y|))                # exact: corrected against powers of two
    step = max(2**E, 2**(b - 7))          # the exponent after the shift
    y' = clip(sign(y) * floor(|y| / step + 0.5), -127, 127) * step

and the input by NITI's clip of (pixel - 128) to +-127. Like NITI, the result of a sample
depends on the batch it is in (the range is the batch's): fed the batches dsptrain
evaluates, ONNX Runtime gives dsptrain's logits. Exact while a layer's integer sums stay
below 2**24 (float32's integer range; every LeNet-5 layer: at most 400 * 127 * 127).
Chains only (conv, linear, relu, max-pool, flatten, dropout): the residual add and the
global average pool align exponents in ways this file does not write.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UserError
from ..nn import Conv2d, Dropout, Flatten, Linear, MaxPool2d, ReLU

INPUT_STEP = 2.0 ** -7       # niti.INPUT_EXPONENT
CHAIN = (Conv2d, Linear, ReLU, MaxPool2d, Flatten, Dropout)


def check(trained) -> None:
    if trained.recipe != "niti":
        raise UserError(f"{trained.path}: format onnx-niti writes NITI's integer evaluation; this checkpoint "
                        f"was trained with {trained.recipe!r} (use onnx or onnx-qdq)")
    for layer in trained.model.layers:
        if not isinstance(layer, CHAIN) or getattr(layer, "source", None):
            raise UserError(f"{trained.path}: format onnx-niti writes chains of conv, linear, relu, max-pool, "
                            f"flatten and dropout; layer {layer.name!r} is a {type(layer).__name__}")


def quantized_input(g, x: str) -> tuple[str, str]:
    """NITI's input: (pixel - 128) / 128 clipped to +-127/128; its step 2**-7."""
    low, high = g.const("niti.in_low", np.array(-127 * INPUT_STEP, np.float32)), \
        g.const("niti.in_high", np.array(127 * INPUT_STEP, np.float32))
    return g.node("Clip", (x, low, high), "niti.input", "niti.input_clip"), \
        g.const("niti.input_step", np.array(INPUT_STEP, np.float32))


def requantize(g, y: str, step_in: str, weight_exponent: int, name: str) -> tuple[str, str]:
    """(the int8-rounded output, its step) of a conv/linear output `y`; see the module doc."""
    c = lambda key, value: g.const(f"{name}.niti_{key}", np.array(value, np.float32))
    n = lambda op, inputs, key, **attrs: g.node(op, inputs, f"{name}.niti_{key}", f"{name}.niti_{key}", **attrs)
    step_e = n("Mul", (step_in, c("w_step", 2.0 ** weight_exponent)), "step_e")
    top = n("ReduceMax", (n("Abs", (y,), "abs"),), "max", keepdims=0)
    two = c("two", 2.0)
    one = c("one", 1.0)
    b = n("Ceil", (n("Mul", (n("Log", (top,), "ln"), c("inv_ln2", 1 / math.log(2))), "log2"),), "b_guess")
    b_minus = n("Sub", (b, one), "b_minus")
    b = n("Where", (n("GreaterOrEqual", (n("Pow", (two, b_minus), "p_minus"), top), "too_high"), b_minus, b), "b_low")
    b_plus = n("Add", (b, one), "b_plus")
    b = n("Where", (n("Less", (n("Pow", (two, b), "p_b"), top), "too_low"), b_plus, b), "b")
    step = n("Max", (step_e, n("Pow", (two, n("Sub", (b, c("seven", 7.0)), "b7")), "step_range")), "step")
    magnitude = n("Floor", (n("Add", (n("Div", (n("Abs", (y,), "abs2"), step), "scaled"), c("half", 0.5)),
                                  "rounded"),), "floor")
    q = n("Clip", (n("Mul", (n("Sign", (y,), "sign"), magnitude), "signed"), c("qmin", -127.0), c("qmax", 127.0)),
          "q")
    return n("Mul", (q, step), "out"), step
