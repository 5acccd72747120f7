"""What a recipe module supports: its settings, checked when its YAML loads (not silently
ignored), and its layer kinds, refused before a model lowers.

NITI's kernels are int8 with power-of-two exponents whatever `bits:` says; FP32 is
float32 throughout. A module lists the values its code honours, key by key
(`tensors.*` stands for every tensor role), and `check_supported` turns any other
value into a ConfigError naming the key, the value and what the module accepts.

A recipe lowers a layer through its tables keyed by layer kind (an `nn` class):

    FORWARD[kind](b, layer, x, shape) -> the layer's output tensor
    BACKWARD[kind](b, layer, err, needs_input_error) -> the error of its input (None where
        none is needed; for Mul and Concat a tuple, one per input)

each entry emitting the layer's ops through the GraphBuilder `b` (Add has no backward entry:
graph.lower passes its error to both inputs unchanged). Adding a layer kind to a recipe is
one entry in each table (recipes share entries where they lower a kind alike); `entry` looks
a kind up and refuses, by name, one the recipe lacks, and `check_layers` does so for a whole
model before anything is lowered.
"""

from __future__ import annotations

from ..errors import ConfigError, LoweringError

ROLES = ("weights", "activations", "errors", "gradients", "updates")


def _get(recipe, dotted: str):
    value = recipe
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def check_supported(recipe, source, supported: dict[str, tuple]) -> None:
    """`supported`: dotted key (with `tensors.*.` for every role) -> the values allowed;
    the module takes no `params`."""
    check_values(recipe, source, supported)
    if recipe.params:
        key = sorted(recipe.params, key=str)[0]
        raise ConfigError(
            source, f"params.{key}", f"unknown for recipe {recipe.name!r} (module {recipe.module!r} takes no params)"
        )


def check_values(recipe, source, supported: dict[str, tuple]) -> None:
    """Each key of `supported` (`tensors.*.` for every role) holds one of its values, and
    no tensor sets a field its own format or policy makes meaningless (check_read)."""
    check_read(recipe, source)
    for key, allowed in supported.items():
        keys = [key.replace("*", role) for role in ROLES] if "*" in key else [key]
        for dotted in keys:
            value = _get(recipe, dotted)
            if value not in allowed:
                raise ConfigError(
                    source,
                    dotted,
                    f"{value!r} is not supported by recipe module "
                    f"{recipe.module!r} (its kernels take {', '.join(map(repr, allowed))})",
                )


def check_read(recipe, source) -> None:
    """Fields no recipe reads given the tensor's other fields: exponent_bits outside the
    fp format, group_size outside group granularity, the adaptive rescale's intervals
    under another policy. Set, they would be ignored; so they are refused by name."""
    for role in ROLES:
        spec = getattr(recipe.tensors, role)
        key = f"tensors.{role}"
        if spec.format != "fp" and spec.exponent_bits:
            raise ConfigError(
                source,
                f"{key}.exponent_bits",
                f"{spec.exponent_bits} is read only with format: fp (this tensor is {spec.format})",
            )
        if spec.granularity != "group" and spec.group_size:
            raise ConfigError(
                source,
                f"{key}.group_size",
                f"{spec.group_size} is read only with granularity: group (this tensor's is {spec.granularity})",
            )
        default = type(spec.rescale)()  # config.Rescale's defaults (algorithms import no config)
        for field in ("min_interval", "max_interval"):
            value = getattr(spec.rescale, field)
            if spec.rescale.policy != "adaptive" and value != getattr(default, field):
                raise ConfigError(
                    source,
                    f"{key}.rescale.{field}",
                    f"{value} is read only with policy: adaptive (this tensor's is {spec.rescale.policy})",
                )


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
