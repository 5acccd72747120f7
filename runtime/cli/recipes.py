"""`dsptrain recipes`: the precision recipes in configs/algorithms/, one line each."""
from __future__ import annotations


def add_parser(sub, common):
    parser = sub.add_parser("recipes", parents=[common],
                            help="the precision recipes in configs/algorithms/, one line each")
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
        opt = r.optimizer.kind + (f" lr {r.optimizer.lr:g} momentum {r.optimizer.momentum:g}"
                                  if r.optimizer.kind == "sgd" else "")
        errors = format_of(t.errors)
        if "low_bits" in r.params:   # AFP: the width adapts per layer between two values
            errors = errors.replace(f"int{t.errors.bits}", f"int{r.params['low_bits']}..{r.params.get('high_bits', t.errors.bits)}")
        rows.append((r.name, f"W {format_of(t.weights)}  A {format_of(t.activations)}  E {errors}  "
                             f"G {format_of(t.gradients)}  U {format_of(t.updates)}  loss {r.loss.kind}  {opt}",
                     r.description))
    width = max(len(name) for name, _, _ in rows)
    for name, formats, description in rows:
        print(f"{name:<{width}}  {formats}")
        if args.verbose:
            print(f"{'':<{width}}  {description}")
    return 0
