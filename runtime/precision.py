"""Which layers of a lowered step compute on integers and which in float, and where they
run: a mixed-precision recipe's choice made visible (`dsptrain plan`, `dsptrain recipes -v`).

A layer's number format is read from what its forward ops write: integer tensors only
(NITI's int8 products, pools, adds), float only (a float recipe's layers, NITI's batch
norm and activations between int8 tensors), or both ("mixed": an emulated recipe's int8
product with its float result, a NITI product with a float bias). The casts between int8
and float32 that a mixed-precision recipe inserts are counted apart, and so are the layers
whose float ops and casts run as one op between int8 tensors (`attrs["fused"]`: NITI's batch
norm with its activation, algorithms/int_fused.py): "fused", int8 in and out, float inside.
"""

from __future__ import annotations

from collections import Counter

CAST_KINDS = ("to_float", "to_int8")
_FLOAT = ("float16", "float32", "float64")


def is_cast(op) -> bool:
    return op.kind.rsplit(".", 1)[-1] in CAST_KINDS


def layer_formats(graph) -> dict[str, str]:
    """layer name -> "integer" | "float" | "mixed", from the forward ops' outputs (casts aside)."""
    written: dict[str, set] = {}
    fused = set()
    for op in graph.eval_ops or graph.ops:
        if op.phase != "forward" or is_cast(op):
            continue
        if op.attrs.get("fused"):
            fused.update(op.attrs["fused"])
            continue
        kinds = {
            "float" if graph.tensors[t].dtype in _FLOAT else "integer"
            for t in op.outputs
            if graph.tensors[t].role != "saved"
        }
        written.setdefault(op.layer, set()).update(kinds)
    formats = {layer: (kinds.pop() if len(kinds) == 1 else "mixed") for layer, kinds in written.items() if kinds}
    return {**formats, **dict.fromkeys(fused, "fused")}


def summary(graph, model, backend_of=None) -> list[str]:
    """Lines for a report: per format, how many layers of which kinds, and where their ops run
    (`backend_of(op)`, when placed)."""
    formats = layer_formats(graph)
    kind_of = {layer.name: type(layer).__name__ for layer in model.layers}
    where: dict[str, Counter] = {}
    for op in graph.ops:
        if backend_of is not None and op.layer in formats and not is_cast(op):
            where.setdefault(formats[op.layer], Counter())[backend_of(op)] += 1
    lines = []
    for fmt in ("integer", "mixed", "float", "fused"):
        layers = [name for name, f in formats.items() if f == fmt]
        if not layers:
            continue
        kinds = Counter(kind_of.get(name, name) for name in layers)
        text = f"{fmt} {len(layers)} layers ({', '.join(f'{k} {n}' for k, n in kinds.most_common())})"
        if fmt == "fused":
            text += ": float inside one op with their casts, int8 in and out"
            fused_kinds = Counter(op.kind for op in graph.ops if op.attrs.get("fused"))
            text += " (" + ", ".join(f"{k} {n}" for k, n in sorted(fused_kinds.items())) + ")"
        if fmt in where:
            text += "; ops on " + ", ".join(f"{b} {n}" for b, n in where[fmt].most_common())
        lines.append(text)
    grouped = grouped_convs(graph, model, backend_of)
    if grouped:
        lines.append(grouped)
    casts = sum(is_cast(op) for op in graph.ops)
    if casts:
        lines.append(f"casts {casts} ops between int8 and float32 (where a float layer meets an integer one)")
    return lines


def grouped_convs(graph, model, backend_of=None) -> str | None:
    """A line for the convs with groups > 1: how many of each shape, the op kinds their products
    lower to (NITI: niti.dwconv_* for an undilated depthwise conv, niti.grpconv_* for the others)
    and, when placed, the backends those ops run on."""
    layers = {layer.name: layer for layer in model.layers if getattr(layer, "groups", 1) > 1}
    if not layers:
        return None
    shapes = Counter(
        ("depthwise" if layer.depthwise else "grouped") + (" dilated" if layer.dilation > 1 else "")
        for layer in layers.values()
    )
    ops = [op for op in graph.ops if op.layer in layers and not is_cast(op) and "conv" in op.kind]
    text = f"grouped convs {len(layers)} layers ({', '.join(f'{k} {n}' for k, n in shapes.most_common())})"
    text += ": products " + ", ".join(f"{k} {n}" for k, n in sorted(Counter(op.kind for op in ops).items()))
    if backend_of is not None:
        text += "; on " + ", ".join(f"{b} {n}" for b, n in Counter(backend_of(op) for op in ops).most_common())
    return text
