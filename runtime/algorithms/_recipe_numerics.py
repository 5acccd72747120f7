"""What an emulated recipe supplies: its grids, products, update rule and extra state, as a
`Numerics` subclass (algorithms/_emulated.py builds the recipe module from it). Not a
recipe: no YAML names this module.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from . import _float_layers as fl
from . import fp32
from ._products import product
from ._quant import Scaled

_INT8_HOOKS = {
    "conv": ("conv2d_s8",),
    "conv_bwd_data": ("conv2d_bwd_data_s8",),
    "conv_bwd_weight": ("conv2d_bwd_weight_s8",),
    "linear": ("gemm_s8",),
    "dwconv": ("dwconv2d_s8",),
    "dwconv_bwd_data": ("dwconv2d_bwd_data_s8",),
    "dwconv_bwd_weight": ("dwconv2d_bwd_weight_s8",),
}


class Numerics:
    """A recipe's grids and update rule. Override what differs; every method gets the op
    (its `attrs` say which layer and role) and the StepContext. The grids, the product and
    the update take the backend the op is placed on first and call its hooks."""

    prefix = "emulated"
    weight_dtype = "float32"
    bn_grids = fl.BNGrids()
    known_params: dict = {}  # params key -> check(value) -> error text or None

    #: the tensor fields whose value the module's code fixes rather than reads (dotted key,
    #: `tensors.*.` for every role -> the values it honours): any other value is refused at
    #: load instead of being silently ignored (_support.check_values)
    supported: dict = {}

    def check_params(self, recipe, source="recipe"):
        from ._support import check_values

        check_values(recipe, source, self.supported)
        for key, value in recipe.params.items():
            if key not in self.known_params:
                raise ConfigError(
                    source,
                    f"params.{key}",
                    f"unknown for recipe {recipe.name!r} (known: {', '.join(sorted(self.known_params)) or 'none'})",
                )
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
    group_update_hooks: tuple = ("sgd_f32",)  # of an update op with layer_update_extras
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
        """Hooks of a product op: kind is conv, conv_bwd_data, conv_bwd_weight (dwconv* for a
        depthwise conv) or linear."""
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
        lr = o.lr * ctx.lr_factor()
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
