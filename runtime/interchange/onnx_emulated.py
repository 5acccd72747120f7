"""The emulated recipes' evaluation written in float ONNX operators: what the `onnx` and
`onnx-qdq` exports of an Octo, AFP, WAGEUBN or FP8 checkpoint carry.

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

WAGEUBN's weights are the top 8 bits of their 24-bit accumulator (numerics.shift_round by
16, nearest), its activations AFP's power-of-two int8 grid. FP8's weights and activations
are rounded to nearest even on the 1-5-2 grid (1-5-10, FP16, in the first and last
parametric layers, the recipe's default `first_last_fp16`), written as an exact float
emulation (Log/Floor for the exponent, corrected at powers of two; Round is half to even);
its products are the FP16 chunked sums onnx_fp8.py writes out.

Like the recipes, a sample's result depends on the batch it is in (the activation's range
is the batch's): fed the batches dsptrain evaluates, ONNX Runtime gives dsptrain's answers
(float32 sums of the same products; Octo's float scales round once more in float32).
"""

from __future__ import annotations

import math

import numpy as np

from ..algorithms._quant import quantize_int_numpy
from ..float_ops import pow2_grid, round_float
from ..numerics import shift_round
from . import onnx_fp8
from .recipe_settings import fp8_settings

#: recipe -> the scale of its 8-bit weight and activation grids (configs/algorithms/*.yaml),
#: or "fp8" for FP8's small-float grids
GRIDS = {"octo": "float", "afp": "pow2", "wageubn": "pow2", "fp8": "fp8", "mls": "mls"}
COMPENSATED = {"octo"}
#: WAGEUBN's weight accumulator bits minus the bits its products see (algorithms/wageubn.py)
WAGEUBN_SHIFT = 24 - 8
#: WAGEUBN's batch norm grids: statistics and x-hat, gamma and beta (algorithms/wageubn.py)
STAT_BITS, AFFINE_BITS = 16, 8
#: FP8's (exponent bits, mantissa bits): FP8 1-5-2 in the middle, FP16 first and last
FP8_GRID, FP16_GRID = (5, 2), (5, 10)


def covers(trained) -> bool:
    return trained.recipe in GRIDS


class Grids:
    """Writes the recipe's quantization into graph `g` (onnx_export._Graph), layer by layer."""

    def __init__(self, g, trained):
        self.g, self.state = g, trained.state
        self.recipe, self.scale = trained.recipe, GRIDS[trained.recipe]
        parametric = [layer.name for layer in trained.model.parametric()]
        fp8 = fp8_settings(trained)  # as trained: the checkpoint's recipe settings
        self.edges = {parametric[0], parametric[-1]} if parametric and fp8["first_last_fp16"] else set()
        self.chunks = (
            onnx_fp8.Chunked(g, fp8["chunk_size"], fp8["chunk_sum"] == "fp16") if self.scale == "fp8" else None
        )
        self.compensated = trained.recipe in COMPENSATED and all(
            f"{layer.name}.comp_scale" in trained.state for layer in trained.model.parametric()
        )

    def chunked(self, layer) -> bool:
        """Is layer's product written as FP8's FP16 chunked sums (onnx_fp8.py)?"""
        return self.chunks is not None and onnx_fp8.exact(layer)

    def weight(self, name: str, w: np.ndarray) -> tuple[np.ndarray, float | None]:
        """(int8 integers, step) of layer `name`'s float weight on the recipe's grid (its
        forward's, exactly); FP8's: (grid values, None)."""
        if self.recipe == "wageubn":
            acc = self.state[f"{name}.w"]  # QTensor: the 24-bit accumulator
            return shift_round(acc.q, WAGEUBN_SHIFT, "round"), 2.0 ** (acc.e + WAGEUBN_SHIFT)
        if self.scale == "fp8":
            return round_float(np.asarray(w, np.float64), *self._small_float(name), "nearest_even", None), None
        q = quantize_int_numpy(np.asarray(w, np.float64), 8, self.scale, "round")
        return q.q.astype(np.int8), float(q.scale)

    def _small_float(self, name: str) -> tuple[int, int]:
        return FP16_GRID if name in self.edges else FP8_GRID

    def activation(self, name: str, x: str, bits: int = 8, dtype=np.float32, scale: str | None = None) -> str:
        """`x` rounded to `bits`-bit integers on the step of its batch's range (zero stays
        zero), in `dtype` arithmetic; FP8: to the nearest small float."""
        if self.scale == "fp8":
            return self._round_float(name, x, *self._small_float(name))
        scale, top_q = scale or self.scale, float(2 ** (bits - 1) - 1)
        n = lambda op, inputs, key, **attrs: self.g.node(op, inputs, f"{name}.q_{key}", f"{name}.q_{key}", **attrs)
        c = lambda key, value: self.g.const(f"{name}.q_{key}_c", np.array(value, dtype))
        top = n("ReduceMax", (n("Abs", (x,), "abs"),), "max", keepdims=0)
        step = n("Div", (top, c("qmax", top_q)), "step") if scale == "float" else self._pow2_step(n, c, top, bits)
        step = n("Where", (n("Greater", (top, c("zero", 0.0)), "nonzero"), step, c("one", 1.0)), "safe_step")
        magnitude = n(
            "Floor",
            (n("Add", (n("Div", (n("Abs", (x,), "abs2"), step), "scaled"), c("half", 0.5)), "rounded"),),
            "floor",
        )
        q = n(
            "Clip",
            (n("Mul", (n("Sign", (x,), "sign"), magnitude), "signed"), c("qmin", -top_q), c("qmax2", top_q)),
            "int",
        )
        return n("Mul", (q, step), "out")

    def batch_norm(self, layer, x: str, floats: dict) -> str:
        """Batch norm at evaluation as the recipe computes it (float_ops.bn_forward_values), in
        float64: ONNX's float32 BatchNormalization rounds otherwise, and a product's grid after
        it can then land a step away. WAGEUBN's grids: 1/std on the 16-bit grid of its
        channels' range, x-hat on the 16-bit grid of the batch's range, gamma and beta on 8-bit."""
        name, shape = layer.name, (1, -1, 1, 1)
        grids = self.recipe == "wageubn"
        on = lambda v, bits: (
            pow2_grid(np.asarray(v, np.float64), bits, "round", None) if grids else np.asarray(v, np.float64)
        ).reshape(shape)
        mean = np.asarray(floats[f"{name}.mean"], np.float64).reshape(shape)
        inv = on(1.0 / np.sqrt(np.asarray(floats[f"{name}.var"], np.float64) + layer.eps), STAT_BITS)
        c = lambda key, value: self.g.const(f"{name}.bn_{key}", np.asarray(value, np.float64))
        n = lambda op, inputs, key, **attrs: self.g.node(op, inputs, f"{name}.bn_{key}", f"{name}.bn_{key}", **attrs)
        wide = n("Cast", (x,), "x64", to=11)  # onnx.TensorProto.DOUBLE
        xhat = n("Mul", (n("Sub", (wide, c("mean", mean)), "centered"), c("inv", inv)), "scaled")
        if grids:
            xhat = self.activation(f"{name}.xhat", xhat, STAT_BITS, np.float64, "pow2")
        gamma, beta = on(floats[f"{name}.gamma"], AFFINE_BITS), on(floats[f"{name}.beta"], AFFINE_BITS)
        y = n("Add", (n("Mul", (xhat, c("gamma", gamma)), "times_gamma"), c("beta", beta)), "y64")
        return n("Cast", (y,), "y", to=1)

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
    def _pow2_step(n, c, top, bits: int = 8) -> str:
        """2**(ceil(log2 top) - (bits - 1)), the log corrected at powers of two (_quant.pow2_exponent's exact ceil)."""
        two, one = c("two", 2.0), c("one_b", 1.0)
        b = n("Ceil", (n("Mul", (n("Log", (top,), "ln"), c("inv_ln2", 1 / math.log(2))), "log2"),), "b_guess")
        b_minus = n("Sub", (b, one), "b_minus")
        b = n(
            "Where", (n("GreaterOrEqual", (n("Pow", (two, b_minus), "p_minus"), top), "too_high"), b_minus, b), "b_low"
        )
        b = n("Where", (n("Less", (n("Pow", (two, b), "p_b"), top), "too_low"), n("Add", (b, one), "b_plus"), b), "b")
        return n("Pow", (two, n("Sub", (b, c("seven", float(bits - 1))), "b7")), "step")

    def _round_float(self, name: str, x: str, exponent_bits: int, mantissa_bits: int) -> str:
        """float_ops.round_float (nearest even, saturating) in ONNX operators: the ulp
        2**(max(floor(log2|x|), emin) - mantissa_bits), the log corrected at powers of two;
        x / ulp is exact (a power of two), Round takes it to the nearest even integer."""
        n = lambda op, inputs, key, **attrs: self.g.node(op, inputs, f"{name}.f_{key}", f"{name}.f_{key}", **attrs)
        c = lambda key, value: self.g.const(f"{name}.f_{key}_c", np.array(value, np.float32))
        bias = 2 ** (exponent_bits - 1) - 1
        emin, largest = 1 - bias, (2 - 2.0**-mantissa_bits) * 2.0 ** (2**exponent_bits - 2 - bias)
        two, one = c("two", 2.0), c("one", 1.0)
        magnitude = n("Abs", (x,), "abs")
        safe = n("Where", (n("Greater", (magnitude, c("zero", 0.0)), "nonzero"), magnitude, one), "safe")
        e = n("Floor", (n("Mul", (n("Log", (safe,), "ln"), c("inv_ln2", 1 / math.log(2))), "log2"),), "e_guess")
        e = n(
            "Where",
            (n("Greater", (n("Pow", (two, e), "p_e"), safe), "too_high"), n("Sub", (e, one), "e_minus"), e),
            "e_low",
        )
        e_plus = n("Add", (e, one), "e_plus")
        e = n("Where", (n("LessOrEqual", (n("Pow", (two, e_plus), "p_plus"), safe), "too_low"), e_plus, e), "e")
        e = n("Max", (e, c("emin", float(emin))), "e_min")
        ulp = n("Pow", (two, n("Sub", (e, c("mantissa", float(mantissa_bits))), "e_ulp")), "ulp")
        rounded = n("Mul", (n("Round", (n("Div", (x, ulp), "scaled"),), "round"), ulp), "rounded")
        return n("Clip", (rounded, c("low", -largest), c("high", largest)), "out")
