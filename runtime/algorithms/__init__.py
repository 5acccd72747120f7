"""Training recipes: one module per recipe, found by the name in its YAML `module:` key.

A recipe module defines:
- `ACTIVATION_DTYPE`: the dtype of the input tensor it expects;
- `check_model(model, recipe)`: raise LoweringError naming a layer it cannot lower;
- `forward(b, layer, x, shape)`, `loss(b, logits, labels)`,
  `backward(b, layer, err, needs_input_error)`: emit ops through a GraphBuilder (forward
  and backward look the layer's kind up in the recipe's `FORWARD` / `BACKWARD` tables:
  _support.py);
- `OPS`: op kind -> function(backend, op, env, ctx) returning {tensor name: value}: it
  calls the hooks of `backend` (the one the plan placed the op on) itself, and a
  requantizing op tells the executor its shift with `ctx.note_shift(op, shift)`;
- `init_params(model, recipe, rng)`: the starting weights and optimizer state;
- `prepare_input(images_uint8, normalize=None)`, `logits_to_float(value)`: the float
  boundaries (`normalize`: data.Normalize, the run's `data.normalize`);
- `join_errors(b, name, errs)` (residual models): one error tensor summing `errs`, where
  branches join in the backward walk (integer recipes align exponents);
- `check_recipe(recipe, source)` (optional): reject bad `params` with a ConfigError at load;
- `TAKES_GIVEN_SHIFT` (optional, default False): its requantizing ops take a given shift
  (`ctx.given_shift(op)`, under backends/base.py's `requantize` rule), so slices of a batch
  can share one: batch splitting, co-scheduling and adaptive rescaling apply to it.

Modules whose names start with `_` or `int_` (NITI's) are helpers, not recipes. NITI and
FP32 are written out in full; Octo, WAGEUBN, AFP, MLS and FP8 share `_emulated.py` (with
`_recipe_numerics.py`, `_products.py`, `_quant.py`) and supply only their number grids and
update rules.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ConfigError

HELPER_PREFIXES = ("_", "int_")  # modules of this package that are not recipes: NITI's int_*.py and _*.py


def recipe_modules() -> list[str]:
    """The recipe modules of this package: a recipe's `module:` may name only these."""
    import pkgutil

    return sorted(
        m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith(HELPER_PREFIXES) and not m.ispkg
    )


def algorithm_module(name: str, source=None) -> ModuleType:
    known = recipe_modules()
    if not isinstance(name, str) or name not in known:
        raise ConfigError(source or "recipe", "module", f"{name!r} is not a recipe module (known: {', '.join(known)})")
    return importlib.import_module(f"{__name__}.{name}")


def takes_given_shift(recipe) -> bool:
    """Does `recipe` (an integer recipe) declare that its requantizing ops take a given shift?"""
    return bool(recipe.integer and getattr(algorithm_module(recipe.module), "TAKES_GIVEN_SHIFT", False))
