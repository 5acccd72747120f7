"""What `dsptrain plan` prints: the peak, its breakdown, and the plan chosen under a budget
(or, when the budget is too small, the smallest budget that fits and its breakdown)."""

from __future__ import annotations

from .budget import Available, BudgetError, Schedule, format_size
from .fit import Fitter, Option, frontier


def _breakdown(option: Option) -> list[str]:
    parts = option.memory.breakdown(option.micro_batch)
    at = parts.pop("at op")
    if option.scratch:
        parts["backend scratch (kept: im2col, packed panels, per-thread buffers)"] = option.scratch
    lines = [f"  peak {format_size(option.peak)} ({option.peak} bytes) at {at}:"]
    width = max(map(len, parts))
    for kind, nbytes in sorted(parts.items(), key=lambda kv: -kv[1]):
        lines.append(f"    {kind:<{width}} {format_size(nbytes):>10}")
    return lines


def describe(fitter: Fitter, budget_source, step: int = 0) -> str:
    graph = fitter.graph
    plain = fitter.plain_peak()
    best = fitter.options[0]
    lines = [
        f"{graph.recipe}, batch {graph.batch}: {len(graph.ops)} ops, {len(graph.tensors)} tensors",
        "without the memory layer (every tensor kept to the end of the step: a bound, a plain step drops"
        f" each after its last op"
        f"{', backend scratch at the whole batch' if best.scratch else ''}): {format_size(plain)}",
        "with the arena (lifetimes, greedy-by-size offsets), no micro-batching or recomputation:",
    ]
    lines += _breakdown(best)
    lines.append(
        f"    arena {format_size(best.memory.arena_bytes)}; live-bytes lower bound {format_size(best.memory.live_peak)}"
    )
    smallest = fitter.smallest()
    lines.append(f"smallest feasible: {format_size(smallest.peak)} ({smallest.label})")
    lines.append("options, cheapest first (cost: MAC-equivalents, model in memory/fit.py):")
    shown = frontier(fitter.options)
    for option in shown:
        lines.append(f"  {format_size(option.peak):>10}  x{option.cost / best.cost:5.2f}  {option.label}")
    if budget_source is None:
        lines.append("no budget: the cheapest plan runs")
        return "\n".join(lines)
    budgets = (
        [(first, v) for first, v in budget_source.points]
        if isinstance(budget_source, Schedule)
        else [(step, budget_source.at(step))]
    )
    for first, limit in budgets:
        where = (
            f"from step {first}"
            if isinstance(budget_source, Schedule)
            else ("MemAvailable less the margin" if isinstance(budget_source, Available) else "fixed")
        )
        try:
            option = fitter.choose(limit)
        except BudgetError:  # say what would fit, with its breakdown, before the error line
            lines.append(
                f"budget {format_size(limit)} ({where}): too small; the smallest budget that fits "
                f"is {format_size(smallest.peak)} ({smallest.peak} bytes: {smallest.label}):"
            )
            lines += _breakdown(smallest)
            continue
        lines.append(
            f"budget {format_size(limit)} ({where}): {option.label}, "
            f"x{option.cost / best.cost:.2f} the cost of the cheapest plan"
        )
        lines += _breakdown(option)
    return "\n".join(lines)
