"""A recipe's lowering is two tables keyed by layer kind (an `nn` class):

    FORWARD[kind](b, layer, x, shape) -> the layer's output tensor
    BACKWARD[kind](b, layer, err, needs_input_error) -> the error of its input (None where
        none is needed; for Mul and Concat a tuple, one per input)

Each entry emits the layer's ops through the GraphBuilder `b`. Add has no backward entry:
graph.lower passes its error to both inputs unchanged. Adding a layer kind to a recipe is one
entry in each of its tables (recipes share entries where they lower a kind alike), and a kind
a table lacks is refused here, by name, before anything is lowered. Not a recipe.
"""

from __future__ import annotations

from ..errors import LoweringError


def entry(table: dict, layer, recipe, why: str = ""):
    """`table`'s function for `layer`'s kind; a LoweringError naming the recipe and the layer
    (then `why`) if the recipe has none."""
    fn = table.get(type(layer))
    if fn is None:
        raise LoweringError(f"recipe {recipe.name!r} cannot lower layer {layer.name!r} ({type(layer).__name__}){why}")
    return fn


def check_layers(model, recipe, table: dict, why: str = "") -> None:
    """Refuse `model` if `table` lacks one of its layers' kinds (`entry`'s error)."""
    for layer in model.layers:
        entry(table, layer, recipe, why)
