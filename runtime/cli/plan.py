"""`dsptrain plan RUN.yaml`: the memory peak of a run, its breakdown, and the plan under a budget.

The budget covers the tensor arena, the largest op's workspace and the kernels' kept
scratch: what the planner places. The Python interpreter, NumPy and the loaded data are
outside it (a run's process RSS is that much larger; its metrics record both).
"""

from __future__ import annotations

from .. import precision
from ..errors import UserError
from .overrides import add_run_options, apply_run_options, planned_parts


def add_parser(sub, common):
    parser = sub.add_parser(
        "plan",
        parents=[common],
        help="the memory peak of a run config, its breakdown, and the plan under a budget",
        description=__doc__.split("\n\n", 1)[1].replace("\n", " "),
    )
    parser.add_argument("run", help="run config YAML")
    add_run_options(parser, training=False)
    parser.add_argument("--batch", type=int, dest="batch_size", metavar="N", help="the same as --batch-size")
    parser.add_argument("--budget", help="override memory.budget: bytes or a size like 64MB")
    parser.add_argument(
        "--ops",
        nargs="?",
        type=int,
        const=0,
        metavar="N",
        help="each op's backend and modeled time on the device profile, with the MAC rate used "
        "(a product's measured one: `dsptrain calibrate`); N: only the N longest",
    )
    return parser


def run(args) -> int:
    from ..config import load_run
    from ..memory import Fixed, describe, parse_size, source_from_config

    config = apply_run_options(load_run(args.run), args)
    source = source_from_config(config.memory, config.source)
    if args.budget is not None:
        try:
            source = Fixed(parse_size(args.budget))
        except ValueError as exc:
            raise UserError(f"--budget: {exc}") from None
    # `dsptrain train`'s assembly and plan builder (overrides.planned_parts): the plan
    # printed is the one a training step of this run gets. Its backends report the scratch
    # their kernels keep (scratch_bytes), which the peak includes, as it does in training;
    # nothing is prepared or run (prepare=False), so no DSP starts.
    parts, planner = planned_parts(config, args, notes=False)
    model, frozen = parts.model, parts.frozen
    try:
        plan = planner.build(parts.graph)  # the training graph at the run's batch, lowered once (assembly)
        fitter = plan.fitter(config.memory.micro_batch, config.memory.recompute)
        placed = sorted({p.backend for p in plan.placement.values()})
        print(f"{config.name}: {model.name} on {', '.join(placed)}")
        print("number formats (layers by what their forward ops write; ops of a step by backend):")
        for line in precision.summary(parts.graph, model, plan.backend_of):
            print(f"  {line}")
        if frozen:
            print(
                f"frozen (no weight gradient, no update, no activation kept for them): "
                f"{', '.join(layer.name for layer in model.layers if layer.name in frozen)}"
            )
        print(describe(fitter, source))
        if args.ops is not None:
            _print_op_times(plan, args.ops)
        elif plan.device is not None:
            print(summary_line(plan) + " (--ops: each op)")
        print(
            "the budget covers what the planner places (tensor arena, op workspace, kernel scratch); "
            "the interpreter, NumPy and the loaded dataset come on top of it in the process's RSS"
        )
    finally:
        planner.close()
    _check_fits(fitter, source, args.budget, config.source)
    return 0


def summary_line(plan) -> str:
    from ..plan.rates import modeled_totals

    totals, measured = modeled_totals(plan)
    return (
        f"modeled on {plan.device.name}: "
        + ", ".join(f"{w} {s * 1e3:.4g} ms" for w, s in sorted(totals.items()))
        + f" a step, serial; {measured} products at their measured rate (hook_speeds)"
    )


def _print_op_times(plan, limit: int) -> None:
    from ..plan.rates import describe_times

    if plan.device is None:
        print("modeled time per op: no device profile (scheduler.device)")
        return
    if limit < 0:
        raise UserError(f"--ops {limit}: give a count of ops >= 0 (0: all)")
    print(describe_times(plan, limit or None))


def _check_fits(fitter, source, flag_value, config_path) -> None:
    """After the report: a budget no plan fits is an error naming where the budget came from."""
    from ..memory import BudgetError, Schedule

    if source is None:
        return
    limits = [v for _, v in source.points] if isinstance(source, Schedule) else [source.at(0)]
    for limit in limits:
        try:
            fitter.choose(limit)
        except BudgetError as exc:
            where = f"--budget {flag_value}" if flag_value is not None else f"{config_path}: memory.budget"
            raise BudgetError(f"{where}: {exc}") from None
