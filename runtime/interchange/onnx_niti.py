"""NITI's integer evaluation written in float ONNX operators: what the float export of a
NITI checkpoint carries (formats `onnx`, `onnx-qdq` and `onnx-niti` of a NITI checkpoint).

NITI keeps every activation as int8 with a power-of-two exponent chosen from the range
of the whole batch after each product (numerics.activation_shift: shift
s = max(ceil(log2(max|acc|)) - 7, 0), round half away from zero, clip to +-127). A float
graph with the dequantized weights alone skips that rounding, and its top-1 answers
differed from dsptrain's on 0.3-0.9 % of Fashion-MNIST test images (ties and near-ties
that the 8-bit logits resolve differently). So the graph carries the rounding: every
tensor travels with its step (2**exponent, a float scalar computed in the graph), and
after each conv and linear layer the float output y (exactly acc * step_in * 2**e_w) becomes

    b = ceil(log2(max|y|))                # exact: corrected against powers of two
    step = max(step_e, 2**(b - 7))        # step_e = step_in * 2**e_w: the exponent after the shift
    y' = clip(sign(y) * floor(|y| / step + 0.5), -127, 127) * step

A residual add (int_residual.py, RefBackend.add_align_s8) rounds both operands onto the
coarser step S (the coarser one is already on it), adds, and rounds the sum the same way
from S; an average pool (global, or windows of stride = kernel) divides the sum by the
window's H*W (a power of two) through the step, then rounds; ReLU, max-pool, flatten keep the step. The input is NITI's clip of
(pixel - 128) to +-127, step 2**-7.

A mixed-precision model (int_mixed.py: batch norm, the sigmoid family, concat, biases, ...)
writes its float layers as plain float operators, as NITI's lowering runs them: where a float
tensor enters an int8 layer it is rounded on its own range's step (the same rule, no floor
from a product), a product with a bias adds it after the exact sums (Conv/Gemm, then Add),
and ReLU, pools, flatten and Add follow what they receive. Its float layers are ONNX
Runtime's float32 arithmetic against dsptrain's (batch norm in double); on the eight mobile
CNNs of the tests the logits agree exactly all the same (tests/interchange/test_mobile_zoo.py),
though a value on a rounding boundary of the next int8 cast could move by a step.

Like NITI, a sample's result depends on the batch it is in (the range is the batch's):
fed the batches dsptrain evaluates (or one image at a time), ONNX Runtime gives
dsptrain's logits. Exact while a layer's integer sums stay below 2**24 (float32's
integer range; every LeNet-5 layer: at most 400 * 127 * 127).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UserError
from ..nn import INPUT, Dropout
from ..numerics import QTensor

INPUT_STEP = 2.0**-7  # niti.INPUT_EXPONENT


def is_niti(trained) -> bool:
    """Was the checkpoint trained by NITI? Its recipe's name, or (a recipe of its own under
    another name) int8 weights with one exponent, which only NITI's module keeps."""
    weights = [trained.state.get(f"{layer.name}.w") for layer in trained.model.parametric()]
    return (
        trained.recipe == "niti"
        or bool(weights)
        and all(isinstance(w, QTensor) and w.q.dtype == np.int8 for w in weights)
    )


def check(trained) -> None:
    if not is_niti(trained):
        raise UserError(
            f"{trained.path}: format onnx-niti writes NITI's integer evaluation; this checkpoint "
            f"was trained with {trained.recipe!r} (use onnx or onnx-qdq)"
        )


def int8_layers(model) -> tuple[set, set]:
    """(layers that read int8, layers that write int8) under NITI's lowering (int_mixed decides
    which layers run in float)."""
    from ..algorithms.int_mixed import layer_dtypes

    formats = layer_dtypes(model)
    return (
        {name for name, (reads, _) in formats.items() if reads == "int8"},
        {name for name, (_, writes) in formats.items() if writes == "int8"},
    )


class Rounding:
    """Writes NITI's activation rounding into graph `g` (onnx_export._Graph) layer by layer,
    keeping each tensor's step (a scalar tensor name) by the engine layer that made it."""

    def __init__(self, g, state, model):
        self.g, self.state = g, state
        self.step_of: dict[str, str] = {}  # int8 outputs only: a float one has no step
        self.reads_int8, self.writes_int8 = int8_layers(model)

    def is_int8(self, layer_name: str) -> bool:
        return layer_name in self.step_of

    def enter(self, layer, x: str, reads: str) -> tuple[str, str]:
        """(the input `layer` reads, the key of its step): a float input of an int8 layer
        rounded on its own range (int_mixed's cast), else as it is."""
        if layer.name not in self.reads_int8 or self.is_int8(reads):
            return x, reads
        key = f"{layer.name}.in"
        zero = self._const(key, "no_floor", 0.0)
        return self._requantize(key, x, zero), key

    def input(self, x: str) -> str:
        """NITI's input: (pixel - 128) / 128 clipped to +-127/128; its step 2**-7."""
        g = self.g
        low = g.const("niti.in_low", np.array(-127 * INPUT_STEP, np.float32))
        high = g.const("niti.in_high", np.array(127 * INPUT_STEP, np.float32))
        self.step_of[INPUT] = g.const("niti.input_step", np.array(INPUT_STEP, np.float32))
        return g.node("Clip", (x, low, high), "niti.input", "niti.input_clip")

    def product(self, layer, y: str, reads: str) -> str:
        """A conv or linear output, rounded to int8 on its fresh step."""
        w_step = self._const(layer.name, "w_step", 2.0 ** self.state[f"{layer.name}.w"].e)
        step_e = self._node(layer.name, "Mul", (self.step_of[reads], w_step), "step_e")
        return self._requantize(layer.name, y, step_e)

    def add(self, layer, a: str, a_from: str, c: str, c_from: str) -> str:
        """NITI's residual add of `a` (made by layer `a_from`) and `c` (by `c_from`)."""
        name = layer.name
        coarse = self._node(name, "Max", (self.step_of[a_from], self.step_of[c_from]), "coarse_step")
        a_on = self._snap(name, a, coarse, "a")
        c_on = self._snap(name, c, coarse, "c")
        return self._requantize(name, self._node(name, "Add", (a_on, c_on), "sum"), coarse)

    def average(self, layer, mean: str, reads: str, hw: int) -> str:
        """An average pool's means (global: (N, C); windows: (N, C, OH, OW)), their step the
        input's divided by the window's H*W."""
        step = self._node(
            layer.name, "Div", (self.step_of[reads], self._const(layer.name, "hw", float(hw))), "step_mean"
        )
        return self._requantize(layer.name, mean, step)

    def keep(self, layer, reads: str) -> None:
        """A layer that moves or selects int8 values (ReLU, max-pool, flatten; dropout, the
        identity at evaluation): the same step. A float layer's output has none."""
        if reads in self.step_of and (layer.name in self.writes_int8 or isinstance(layer, Dropout)):
            self.step_of[layer.name] = self.step_of[reads]

    # ------------------------------------------------------------ helpers
    def _const(self, name, key, value):
        return self.g.const(f"{name}.niti_{key}", np.array(value, np.float32))

    def _node(self, name, op, inputs, key, **attrs):
        return self.g.node(op, inputs, f"{name}.niti_{key}", f"{name}.niti_{key}", **attrs)

    def _snap(self, name, y, step, key):
        """y rounded to a multiple of `step`, halves away from zero (numerics.shift_round's round)."""
        n = lambda op, inputs, k: self._node(name, op, inputs, f"{key}_{k}")
        scaled = n("Div", (n("Abs", (y,), "abs"), step), "scaled")
        magnitude = n("Floor", (n("Add", (scaled, self._const(name, f"{key}_half", 0.5)), "rounded"),), "floor")
        return n("Mul", (n("Mul", (n("Sign", (y,), "sign"), magnitude), "signed"), step), "snapped")

    def _requantize(self, name, y, step_e) -> str:
        """(y rounded to int8 on its range's step, never finer than `step_e`); records the step."""
        n = lambda op, inputs, key, **attrs: self._node(name, op, inputs, key, **attrs)
        c = lambda key, value: self._const(name, key, value)
        top = n("ReduceMax", (n("Abs", (y,), "abs"),), "max", keepdims=0)
        two, one = c("two", 2.0), c("one", 1.0)
        b = n("Ceil", (n("Mul", (n("Log", (top,), "ln"), c("inv_ln2", 1 / math.log(2))), "log2"),), "b_guess")
        b_minus = n("Sub", (b, one), "b_minus")
        b = n(
            "Where", (n("GreaterOrEqual", (n("Pow", (two, b_minus), "p_minus"), top), "too_high"), b_minus, b), "b_low"
        )
        b_plus = n("Add", (b, one), "b_plus")
        b = n("Where", (n("Less", (n("Pow", (two, b), "p_b"), top), "too_low"), b_plus, b), "b")
        step = n("Max", (step_e, n("Pow", (two, n("Sub", (b, c("seven", 7.0)), "b7")), "step_range")), "step")
        magnitude = n(
            "Floor",
            (n("Add", (n("Div", (n("Abs", (y,), "abs2"), step), "scaled"), c("half", 0.5)), "rounded"),),
            "floor",
        )
        q = n(
            "Clip", (n("Mul", (n("Sign", (y,), "sign"), magnitude), "signed"), c("qmin", -127.0), c("qmax", 127.0)), "q"
        )
        self.step_of[name] = step
        return n("Mul", (q, step), "out")
