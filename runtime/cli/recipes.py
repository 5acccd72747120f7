"""`dsptrain recipes`: the precision recipes in configs/algorithms/, one line each."""

from __future__ import annotations


def add_parser(sub, common):
    parser = sub.add_parser(
        "recipes", parents=[common], help="the precision recipes in configs/algorithms/, one line each"
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="add each recipe's description")
    return parser


def format_of(fmt) -> str:
    """One tensor role in a few characters: int8/pow2, int8/float/group16, fp8(1-5-2), fp32."""
    if fmt.format == "float32":
        return "fp32"
    if fmt.format == "fp":
        text = f"fp{fmt.bits}(1-{fmt.exponent_bits}-{fmt.bits - 1 - fmt.exponent_bits})"
    else:
        text = f"int{fmt.bits}" + (f"/{fmt.scale}" if fmt.scale != "none" else "")
    if fmt.granularity == "group":
        text += f"/group{fmt.group_size}"
    elif fmt.granularity == "channel":
        text += "/channel"
    return text + ("/sto" if fmt.rounding == "sto" else "")


def run(args) -> int:
    from ..config import CONFIG_ROOT, load_recipe

    rows = []
    for path in sorted((CONFIG_ROOT / "algorithms").glob("*.yaml")):
        r = load_recipe(str(path))
        t = r.tensors
        rates = f"lr {r.optimizer.lr:g} momentum {r.optimizer.momentum:g}"
        opt = r.optimizer.kind + (f" {rates}" if r.optimizer.kind == "sgd" else f" (float layers: sgd {rates})")
        errors = format_of(t.errors)
        if "low_bits" in r.params:  # AFP: the width adapts per layer between two values
            high = r.params.get("high_bits", t.errors.bits)
            errors = errors.replace(f"int{t.errors.bits}", f"int{r.params['low_bits']}..{high}")
        rows.append(
            (
                r.name,
                f"W {format_of(t.weights)}  A {format_of(t.activations)}  E {errors}  "
                f"G {format_of(t.gradients)}  U {format_of(t.updates)}  loss {r.loss.kind}  {opt}",
                r.description,
            )
        )
    width = max(len(name) for name, _, _ in rows)
    for name, formats, description in rows:
        print(f"{name:<{width}}  {formats}")
        if args.verbose:
            print(f"{'':<{width}}  {description}")
            print(f"{'':<{width}}  {where_ops_run(name)}")
            print(f"{'':<{width}}  {formats_on_resnet(name)}")
            print(f"{'':<{width}}  {where_grouped_convs_run(name)}")
    return 0


def where_ops_run(recipe_name: str) -> str:
    """Where a LeNet-5 step's ops go under `--backend dsp`: the first backend in placement
    order whose hooks cover the op, as plan.build decides, with the hooks that put them there."""
    from ..backends import PRIORITY, backend_class
    from ..config import load_recipe
    from ..graph import lower
    from ..models import build_model

    try:
        graph = lower(build_model("lenet5"), load_recipe(recipe_name), batch=64)
    except Exception as exc:  # a recipe that cannot lower LeNet-5 says so
        return f"ops: cannot lower lenet5 ({exc})"
    ops: dict[str, int] = {}
    hooks: dict[str, set] = {}
    for op in graph.ops:
        name = next(b for b in PRIORITY if set(op.hooks) <= backend_class(b).hooks or b == "ref")
        ops[name] = ops.get(name, 0) + 1
        hooks.setdefault(name, set()).update(op.hooks or ("reshape",))
    return "ops of a lenet5 step under --backend dsp: " + "; ".join(
        f"{b} {ops[b]} ({', '.join(sorted(hooks[b]))})" for b in PRIORITY if b in ops
    )


def formats_on_resnet(recipe_name: str) -> str:
    """The number format of each layer kind of the built-in resnet18 (batch norm, residual
    adds) under the recipe: where a mixed-precision recipe runs float layers between integer ones."""
    from .. import precision
    from ..config import load_recipe
    from ..graph import lower
    from ..models import build_model

    model = build_model("resnet18")
    try:
        graph = lower(model, load_recipe(recipe_name), batch=8)
    except Exception as exc:  # a recipe that cannot lower it says so
        return f"layers: cannot lower resnet18 ({exc})"
    return "layers of resnet18: " + "; ".join(precision.summary(graph, model))


def where_grouped_convs_run(recipe_name: str) -> str:
    """Where the products of grouped convs go under `--backend dsp` (placement order, as
    where_ops_run): a probe of a grouped 1x1, a depthwise 3x3, a dilated depthwise 3x3 and a
    dilated grouped 3x3 (ShuffleNetV1 / ResNeXt / DeepLab shapes), by op kind."""
    from ..backends import PRIORITY, backend_class
    from ..config import load_recipe
    from ..graph import lower
    from ..nn import Conv2d, Flatten, Linear, Model

    probe = Model(
        "grouped_probe",
        (16, 16, 8),
        10,
        (
            Conv2d("grouped1x1", 8, 16, 1, groups=4),
            Conv2d("depthwise", 16, 16, 3, padding=1, groups=16),
            Conv2d("depthwise_dilated", 16, 16, 3, padding=2, groups=16, dilation=2),
            Conv2d("grouped_dilated", 16, 16, 3, stride=2, padding=2, groups=2, dilation=2),
            Flatten("flatten"),
            Linear("fc", 1024, 10),
        ),
    )
    try:
        graph = lower(probe, load_recipe(recipe_name), batch=8)
    except Exception as exc:  # a recipe that cannot lower them says so
        return f"grouped convs: cannot lower them ({exc})"
    where: dict[str, set] = {}
    for op in graph.ops:
        if op.layer in ("flatten", "fc") or not op.macs:  # the products only
            continue
        name = next(b for b in PRIORITY if set(op.hooks) <= backend_class(b).hooks or b == "ref")
        where.setdefault(op.kind, set()).add(name)
    return (
        "grouped convs (grouped 1x1, depthwise, dilated depthwise, dilated grouped) under --backend dsp: "
        + ", ".join(f"{kind} on {'/'.join(sorted(b))}" for kind, b in sorted(where.items()))
    )
