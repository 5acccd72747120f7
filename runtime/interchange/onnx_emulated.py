"""The int8 emulated recipes' evaluation written in float ONNX operators: what the `onnx`
and `onnx-qdq` exports of an Octo or AFP checkpoint carry.

These recipes evaluate a conv or linear layer on quantized operands (algorithms/_quant.py
quantize_int): the weight and the layer's input each become 8-bit integers with one
scale for the tensor, max|x| / 127 (Octo) or the power of two 2**(ceil(log2 max|x|) - 7)
(AFP), rounded half away from zero and clipped to +-127; Octo then applies its
compensation layer y = (1 + gamma) * z + beta per output channel. A float graph of the
master weights skips all three: an Octo export without its compensation layers agreed
with dsptrain on 9 % of top-1 answers, an AFP one on 94 % (LeNet-5 after 8 steps). So the
graph carries them: the weights as the recipe's grid gives them (values, or in QDQ form
the int8 integers and their scale), each product's input rounded on its batch's range in
float operators, and the compensation as Mul and Add.

Like the recipes, a sample's result depends on the batch it is in (the activation's range
is the batch's): fed the batches dsptrain evaluates, ONNX Runtime gives dsptrain's answers
(float32 sums of the same products; Octo's float scales round once more in float32).
"""

from __future__ import annotations

import math

import numpy as np

from ..algorithms._quant import quantize_int_numpy

#: recipe -> the scale of its 8-bit weight and activation grids (configs/algorithms/*.yaml)
GRIDS = {"octo": "float", "afp": "pow2"}
COMPENSATED = {"octo"}


def covers(trained) -> bool:
    return trained.recipe in GRIDS


class Grids:
    """Writes the recipe's quantization into graph `g` (onnx_export._Graph), layer by layer."""

    def __init__(self, g, trained):
        self.g, self.state = g, trained.state
        self.scale = GRIDS[trained.recipe]
        self.compensated = trained.recipe in COMPENSATED and all(
            f"{layer.name}.comp_scale" in trained.state for layer in trained.model.parametric()
        )

    def weight(self, w: np.ndarray) -> tuple[np.ndarray, float]:
        """(int8 integers, step) of a float weight on the recipe's grid (its forward's, exactly)."""
        q = quantize_int_numpy(np.asarray(w, np.float64), 8, self.scale, "round")
        return q.q.astype(np.int8), float(q.scale)

    def activation(self, name: str, x: str) -> str:
        """`x` rounded to int8 on the step of its batch's range (zero stays zero)."""
        n = lambda op, inputs, key, **attrs: self.g.node(op, inputs, f"{name}.q_{key}", f"{name}.q_{key}", **attrs)
        c = lambda key, value: self.g.const(f"{name}.q_{key}_c", np.array(value, np.float32))
        top = n("ReduceMax", (n("Abs", (x,), "abs"),), "max", keepdims=0)
        step = n("Div", (top, c("qmax", 127.0)), "step") if self.scale == "float" else self._pow2_step(n, c, top)
        step = n("Where", (n("Greater", (top, c("zero", 0.0)), "nonzero"), step, c("one", 1.0)), "safe_step")
        magnitude = n(
            "Floor",
            (n("Add", (n("Div", (n("Abs", (x,), "abs2"), step), "scaled"), c("half", 0.5)), "rounded"),),
            "floor",
        )
        q = n(
            "Clip",
            (n("Mul", (n("Sign", (x,), "sign"), magnitude), "signed"), c("qmin", -127.0), c("qmax2", 127.0)),
            "int",
        )
        return n("Mul", (q, step), "out")

    def compensation(self, layer, y: str, conv: bool) -> str:
        """Octo's y = (1 + gamma) * z + beta per output channel (channels on axis 1)."""
        if not self.compensated:
            return y
        name, shape = layer.name, ((-1, 1, 1) if conv else (-1,))
        gain = (1 + np.asarray(self.state[f"{name}.comp_scale"], np.float32)).astype(np.float32).reshape(shape)
        shift = np.asarray(self.state[f"{name}.comp_shift"], np.float32).reshape(shape)
        scaled = self.g.node(
            "Mul", (y, self.g.const(f"{name}.comp_gain", gain)), f"{name}.comp_mul", f"{name}.comp_mul"
        )
        return self.g.node(
            "Add", (scaled, self.g.const(f"{name}.comp_shift", shift)), f"{name}.comp", f"{name}.comp_add"
        )

    @staticmethod
    def _pow2_step(n, c, top) -> str:
        """2**(ceil(log2 top) - 7), the log corrected at powers of two (_quant.pow2_exponent's exact ceil)."""
        two, one = c("two", 2.0), c("one_b", 1.0)
        b = n("Ceil", (n("Mul", (n("Log", (top,), "ln"), c("inv_ln2", 1 / math.log(2))), "log2"),), "b_guess")
        b_minus = n("Sub", (b, one), "b_minus")
        b = n(
            "Where", (n("GreaterOrEqual", (n("Pow", (two, b_minus), "p_minus"), top), "too_high"), b_minus, b), "b_low"
        )
        b = n("Where", (n("Less", (n("Pow", (two, b), "p_b"), top), "too_low"), n("Add", (b, one), "b_plus"), b), "b")
        return n("Pow", (two, n("Sub", (b, c("seven", 7.0)), "b7")), "step")
