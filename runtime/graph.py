"""Op records and `lower()`: a model plus a recipe becomes a TrainGraph.

A TrainGraph is a flat list of ops in execution order (forward, loss, backward,
update). Each op names the tensors it reads and writes, the backend hooks it needs
(so placement can ask `supports`), and an `id` that keys its random bits. What an op
*does* lives with its recipe in `algorithms/<recipe>.py`, looked up by `op.kind`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .nn import INPUT, MULTI_INPUT, Add, BatchNorm2d, Dropout, inputs_of

PHASES = ("forward", "loss", "backward", "update")
ROW_ROLES = ("input", "label", "activation", "saved", "error")  # tensors with one row per sample
REQUANT_HOOK = "absmax"  # ops whose hooks include a range estimate requantize a product
# Element-wise ops that take the range of their whole result inside one hook and return
# (q, exponent) (algorithms/int_residual.py): a residual add, an error join, a global
# average pool. Like a product they need one shift over all micro-batch slices, given to
# the hook. Their workspace is sized in memory/planner.py (RANGE_HOOK_WORKSPACE).
RANGE_HOOKS = ("add_align_s8", "avgpool_global_s8")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of the graph: its shape for the planned batch, dtype and role."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name: int8, int32, float32, ...
    role: str  # input | label | weight | state | activation | saved | error | grad | accum

    @property
    def nbytes(self) -> int:
        import numpy as np

        n = 1
        for d in self.shape:
            n *= d
        return n * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Product:
    """The int8 product an op computes, declared by the recipe that lowers it (the op's
    `attrs["product"]`) so that a backend sizes its scratch or picks a kernel from it, not
    from the op's kind. Operands by pass, in the op's inputs and outputs:
    forward (x, w) -> y; backward_data (err, w) -> dx; backward_weight (err, x) -> dw,
    with x (N, H, W, C) and w (O, KH, KW, C) for a convolution (stride, pad in the attrs),
    x (N, ...) and w (O, I) for a linear layer's GEMM."""

    layer: str  # "conv" | "linear"
    pass_: str  # "forward" | "backward_data" | "backward_weight"


@dataclass(frozen=True)
class Op:
    """One step of the training graph."""

    id: int  # stable within a graph; keys the op's random bits
    name: str  # e.g. "conv1.fwd", "fc3.bwd_weight", "loss.grad"
    kind: str  # e.g. "niti.conv_fwd": the function that runs it
    layer: str  # the model layer it belongs to ("loss" for the loss)
    phase: str  # one of PHASES
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    hooks: tuple[str, ...]  # backend hooks it calls
    attrs: dict = field(default_factory=dict, compare=False, hash=False)
    macs: int = 0  # multiply-accumulates per step at the planned batch

    def __repr__(self) -> str:
        return f"Op({self.name}: {self.kind})"

    def is_requant(self) -> bool:
        """Does the op requantize a product (its hooks include a range estimate)?"""
        return REQUANT_HOOK in self.hooks

    def range_hook(self) -> str | None:
        """The RANGE_HOOKS hook the op calls, if any."""
        return next((h for h in self.hooks if h in RANGE_HOOKS), None)

    def takes_range(self) -> bool:
        """Does the op estimate the range of its result (a requantized product, or a range hook)?
        Such an op needs one shift over every slice of the batch and every re-run."""
        return self.is_requant() or self.range_hook() is not None

    @property
    def product(self) -> Product | None:
        """The int8 product the op computes, if its recipe declared one."""
        return self.attrs.get("product")

    def updates_state(self) -> bool:
        """Does the op read and rewrite a tensor in place (an update's weights, batch norm's running statistics)?
        Running it twice would apply its update twice, so it is never recomputed."""
        return bool(set(self.inputs) & set(self.outputs))

    def is_alias(self) -> bool:
        """Is the op's output a view of its input (a reshape), with no memory of its own?
        The recipe says so when it lowers the op (`b.op(..., alias=True)`)."""
        return bool(self.attrs.get("alias"))


@dataclass
class TrainGraph:
    """Everything one training step runs, in order, and every tensor it touches."""

    recipe: str
    batch: int
    ops: list[Op]
    tensors: dict[str, TensorSpec]
    params: list[str]  # names of the weight tensors, in layer order
    logits: str  # the tensor holding the model output
    eval_ops: list[Op] = field(default_factory=list)  # forward-only ops for evaluation
    training: bool = True  # False: the forward ops alone (evaluation)
    # Do its requantizing ops take a given shift (the recipe's TAKES_GIVEN_SHIFT), so that
    # slices of a batch can share one? Batch splitting and micro-batches need it.
    takes_given_shift: bool = False

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)

    def is_row_shaped(self, name: str) -> bool:
        """Has tensor `name` one row per sample of the batch?"""
        spec = self.tensors[name]
        return spec.role in ROW_ROLES and len(spec.shape) > 0 and spec.shape[0] == self.batch

    def row_local(self, op: Op) -> bool:
        """Can `op` run on a slice of the batch's rows? Row-shaped outputs, or weight gradients
        (summed over slices). An op that mixes rows (batch statistics) says so with
        `attrs["rows"] = "coupled"`."""
        if op.phase == "update" or op.attrs.get("rows") == "coupled":
            return False
        return all(self.is_row_shaped(t) or self.tensors[t].role in ("grad", "accum") for t in op.outputs)


class GraphBuilder:
    """Collects ops and tensors while a recipe lowers a model."""

    def __init__(self, recipe, batch: int, model=None, training: bool = True, frozen=frozenset()):
        self.recipe, self.batch = recipe, batch
        self.model, self.training = model, training  # for recipes that treat some layers apart
        self.frozen = frozenset(frozen)  # layers that do not train (a frozen batch norm evaluates)
        self.ops: list[Op] = []
        self.tensors: dict[str, TensorSpec] = {}
        self.params: list[str] = []
        self.layer_io: dict[str, tuple[str, str]] = {}  # layer -> (input tensor, output tensor)
        self.layer_inputs: dict[str, tuple[str, ...]] = {}  # layer -> every tensor it reads, in order

    def tensor(self, name, shape, dtype, role) -> str:
        self.tensors[name] = TensorSpec(name, tuple(int(d) for d in shape), str(dtype), role)
        return name

    def param(self, name, shape, dtype) -> str:
        self.params.append(name)
        return self.tensor(name, shape, dtype, "weight")

    def find(self, name: str) -> Op:
        return next(op for op in self.ops if op.name == name)

    def op(self, name, kind, layer, phase, inputs, outputs, hooks=(), macs=0, product=None, **attrs) -> Op:
        """Emit an op; `product` = (layer, pass) declares the int8 product it computes (Product);
        `alias=True` that its output is a view of its input (Op.is_alias)."""
        if product is not None:
            attrs["product"] = Product(*product)
        op = Op(len(self.ops), name, kind, layer, phase, tuple(inputs), tuple(outputs), tuple(hooks), attrs, int(macs))
        self.ops.append(op)
        return op


def lower(model, recipe, batch: int, training: bool = True, frozen=frozenset()) -> TrainGraph:
    """Lower `model` under `recipe` for `batch` samples: forward, loss, backward, update.

    The walk is shared; the recipe module supplies `forward(b, layer, x, shape)`,
    `loss(b, logits, labels)` and `backward(b, layer, err, needs_input_error)`, and for
    residual models `join_errors(b, name, errs)`. With `training=False` only the forward
    ops are emitted (evaluation).

    Graphs need not be chains: a layer may read an earlier layer's output (`source`), `Add`
    reads two, `Mul` and `Concat` the ones they name (nn.inputs_of); a recipe's forward gets
    the first and finds all in `b.layer_inputs`. The backward walk visits layers in reverse,
    gives each tensor the errors of every layer that read it, and where there are several
    asks the recipe to sum them (`join_errors`; integer recipes align exponents there). An
    `Add` passes its error unchanged to both inputs; a recipe's backward of a `Mul` or a
    `Concat` is told which inputs need an error (a tuple) and returns one per input. A layer
    gets a backward op only if something upstream of it, or itself, has parameters; for a
    chain this is exactly "from the last layer down to the first parametric one", with no
    input error for the latter.

    A mixed-precision recipe (NITI) says which dtype each layer reads (`input_dtype(b, layer,
    inputs)`) and emits the conversion (`cast(b, tensor, dtype, name, layer, phase)`): a layer
    whose inputs have another dtype reads them through cast ops, and the errors of those
    inputs are cast back, so every error has the dtype of its tensor (`_cast_inputs`, `route`).

    `frozen` names layers that do not train (fine-tuning; `train.freeze`): they count as
    having no parameters above, so no error flows into a frozen stem at all, and their
    weight-gradient and update ops are removed (`_without_frozen`), so nothing keeps an
    activation only those ops would read. Done here once, for every recipe. A frozen batch
    norm normalises by its running statistics and keeps them, as at evaluation (torchvision's
    FrozenBatchNorm2d: fine-tuning on a phone's few samples leaves a frozen backbone's
    statistics alone); its backward scales the error by gamma / sqrt(var + eps).
    """
    from .algorithms import algorithm_module, takes_given_shift
    from .algorithms._fusions import fuse_pool_into_compensation, fuse_relu_into_compensation, fuse_relu_pool
    from .algorithms.int_fused import fuse_bn_casts

    algorithm = algorithm_module(recipe.module)
    algorithm.check_model(model, recipe)
    b = GraphBuilder(recipe, batch, model, training, frozen)
    logits, needs_error, casts = _forward(algorithm, b, model, batch, training, frozen)
    forward_ops = list(b.ops)
    if training:
        _backward(algorithm, b, model, logits, needs_error, casts)
    ops = _without_frozen(b, frozen) if training and frozen else b.ops
    ops, forward_ops = fuse_relu_pool(ops, forward_ops, b.tensors)  # the float recipes' ReLU + max-pool
    ops, forward_ops = fuse_relu_into_compensation(ops, forward_ops, b.tensors)  # Octo's ReLU after a layer
    ops, forward_ops = fuse_pool_into_compensation(ops, forward_ops, b.tensors)  # Octo's pool backward + compensation's
    ops, forward_ops = fuse_bn_casts(ops, forward_ops, b.tensors)  # NITI's batch norm between int8 tensors
    return TrainGraph(
        recipe.name,
        batch,
        ops if training else forward_ops,
        b.tensors,
        b.params,
        logits,
        eval_ops=forward_ops,
        training=training,
        takes_given_shift=takes_given_shift(recipe),
    )


def _forward(algorithm, b, model, batch, training, frozen) -> tuple[str, dict, dict]:
    """The forward walk: each layer's ops on its inputs (cast to the dtype the recipe wants).
    Returns the logits, whether an error has to flow into each tensor, and the casts (a cast's
    output -> the tensor it converts)."""
    x = b.tensor(INPUT, (batch, *model.input_shape), algorithm.ACTIVATION_DTYPE, "input")
    output_of = {INPUT: x}
    needs_error = {x: False}
    casts = {}
    previous = INPUT
    for layer, shape in zip(model.layers, model.shapes()):
        inputs = tuple(output_of[name] for name in inputs_of(layer, previous))
        if hasattr(algorithm, "input_dtype"):
            inputs = _cast_inputs(algorithm, b, layer, inputs, casts, needs_error)
        x, previous = inputs[0], layer.name
        b.layer_inputs[layer.name] = inputs
        if not training and isinstance(layer, Dropout):  # dropout is the identity at evaluation
            output_of[layer.name] = x
            b.layer_io[layer.name] = (x, x)
            continue
        out = algorithm.forward(b, layer, x, (batch, *shape))
        b.layer_io[layer.name] = (x, out)
        trains = (hasattr(layer, "weight_shape") or isinstance(layer, BatchNorm2d)) and layer.name not in frozen
        needs_error[out] = trains or any(needs_error[t] for t in inputs)
        output_of[layer.name] = x = out
    return x, needs_error, casts


def _backward(algorithm, b, model, logits, needs_error, casts) -> None:
    """The loss, then the backward walk in reverse: each tensor gets the errors of every layer
    that read it, joined by the recipe where there are several."""
    labels = b.tensor("labels", (b.batch,), "int64", "label")
    errors = {logits: [algorithm.loss(b, logits, labels)]}  # tensor -> errors flowing into it

    def route(target, err, layer_name):
        """`err` joins the errors of `target`; the error of a cast's output is cast back first
        (by `layer_name`'s op), so every error has its tensor's dtype."""
        if target in casts:
            target = casts[target]
            err = algorithm.cast(b, err, b.tensors[target].dtype, f"{err}.cast", layer_name, "backward")
        errors.setdefault(target, []).append(err)

    for layer in reversed(model.layers):
        x, out = b.layer_io[layer.name]
        if not needs_error[out] or out not in errors:
            continue
        err = _joined(algorithm, b, out, errors.pop(out))
        inputs = b.layer_inputs[layer.name]
        if isinstance(layer, Add):
            for target in inputs:
                if needs_error[target]:
                    route(target, err, layer.name)
            continue
        if isinstance(layer, MULTI_INPUT):
            needs = tuple(needs_error[t] for t in inputs)
            for target, err_in in zip(inputs, algorithm.backward(b, layer, err, needs_input_error=needs)):
                if err_in is not None:
                    route(target, err_in, layer.name)
            continue
        err_in = algorithm.backward(b, layer, err, needs_input_error=needs_error[x])
        if needs_error[x]:
            route(x, err_in, layer.name)


def _cast_inputs(algorithm, b, layer, inputs, casts, needs_error) -> tuple:
    """`inputs` in the dtype the recipe wants `layer` to read (`input_dtype`; None: as they are),
    each mismatched one through its own cast op (`cast`), whose output this layer alone reads,
    so its error (one) is cast back as soon as the layer's backward makes it (`route`)."""
    wanted = algorithm.input_dtype(b, layer, inputs)
    cast = []
    for i, t in enumerate(inputs):
        if wanted is not None and b.tensors[t].dtype != wanted:
            name = f"{layer.name}.in{i if len(inputs) > 1 else ''}.{wanted}"
            converted = algorithm.cast(b, t, wanted, name, layer.name, "forward")
            casts[converted], needs_error[converted] = t, needs_error[t]
            t = converted
        cast.append(t)
    return tuple(cast)


def _without_frozen(b, frozen) -> list:
    """The ops minus frozen layers' weight gradients and updates. An op of a frozen layer
    goes when every output is a gradient (the recipes' bwd_weight ops) or it is an update;
    tensors only those ops wrote go too. A frozen batch norm with an error to pass on (a
    trainable layer below it) keeps its backward op, whose gamma/beta gradients go unused."""

    def drops(op):
        return op.layer in frozen and (
            op.phase == "update" or (op.phase == "backward" and all(b.tensors[t].role == "grad" for t in op.outputs))
        )

    kept = [op for op in b.ops if not drops(op)]
    used = {t for op in kept for t in (*op.inputs, *op.outputs)}
    for name in [t for t, spec in b.tensors.items() if spec.role == "grad" and t not in used]:
        del b.tensors[name]
    return kept


def _joined(algorithm, b, tensor, errs):
    """One error for `tensor`: the only one, or the recipe's sum of several."""
    if len(errs) == 1:
        return errs[0]
    return algorithm.join_errors(b, f"err.{tensor}.sum", errs)
