"""The profile table: a Recorder's events added up per op and per layer.

Each row is one op of the graph (or one layer in the roll-up) over the profiled steps:
its calls, its measured time and share of the steps' time, the work it counted (MACs:
int8 multiply-accumulates under an integer recipe, float ones otherwise; achieved
GOP/s = 2 x MACs / seconds), the bytes it read and wrote (plan.op_bytes: what the energy
estimate charges), the memory plan's bytes for its tensors (inputs and outputs as the
memory planner sizes them, memory/planner.value_bytes) and the workspace it allocates
(memory/planner.op_workspace), where it ran on the DSP the packets QEMU counted and the
modeled DSP time (cost.dsp_model_time, per op), and its share of the energy estimate
(energy/estimate.parts_joules over its own work, dynamic energy only).

The steps' total is the Step's own clock (StepStats.time_s: the executor's run); what the
ops' clocks leave of it is the executor's own time between ops, a row of its own, so the
table adds up to the measured step. Under co-scheduling the CPU's and the DSP worker's
ops run at once, their clocks add up to more than the step, and that row is the overlap
(negative).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..energy import MeterError, WorkCounts
from ..energy.coeffs import DEVICES
from ..energy.estimate import parts_joules
from ..memory.planner import op_workspace, value_bytes
from .model import modeled_seconds, modeled_step_seconds

ROLES = ("forward", "loss", "backward data", "weight gradient", "update", "quantiser", "executor")
BETWEEN_OPS = "(executor between ops)"
OVERLAP = "(overlap: ops on two threads at once)"  # co-scheduling: the ops' clocks add up to more than the step


# hooks that put a float tensor on a recipe's grid (the emulated recipes' quantisers)
QUANTISER_HOOKS = frozenset({"quantize_f", "prc_quantize", "quantize_mls_ranged", "round_float"})


def role(op) -> str:
    """The op's part in the recipe: forward, loss, backward data, weight gradient, update, quantiser."""
    if op.phase == "update":
        return "update"
    if op.product is None and QUANTISER_HOOKS.intersection(op.hooks):
        return "quantiser"
    if op.phase == "loss":
        return "loss"
    product = op.product
    if product is not None and product.pass_ == "backward_weight":
        return "weight gradient"
    return "forward" if op.phase == "forward" else "backward data"


@dataclass
class Row:
    """One op (or layer, or the total) over the profiled steps."""

    name: str
    kind: str
    layer: str
    role: str
    backend: str
    calls: int = 0
    seconds: float = 0.0
    share: float = 0.0  # of the steps' measured time
    macs: int = 0
    bytes_moved: int = 0
    tensor_bytes: int = 0  # inputs and outputs as the memory plan sizes them (per call of the whole batch)
    workspace_bytes: int = 0  # what the op allocates besides (memory/planner.op_workspace)
    dsp_packets: int = 0
    dsp_critical_packets: int = 0
    dsp_calls: int = 0
    dsp_model_s: float | None = None  # modeled DSP time of the calls that ran on the DSP
    energy_j: float | None = None  # the estimate's dynamic energy of its work
    energy_share: float | None = None

    @property
    def mean_s(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0

    @property
    def gops(self) -> float:
        return 2 * self.macs / self.seconds / 1e9 if self.seconds > 0 and self.macs else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "mean_s": self.mean_s, "gop_per_s": self.gops}


@dataclass
class Profile:
    """The table of one profiled run: per-op rows sorted by time, the per-layer roll-up, the total."""

    run: str
    model: str
    recipe: str
    backends: str
    steps: int
    batch: int
    step_seconds: list
    modeled_step_seconds: list | None  # each step on the modeled clock (model.py), when DSP calls ran
    ops: list
    layers: list
    between: Row  # the steps' time outside the ops' clocks: the executor's own
    total: Row
    integer: bool
    energy_device: str | None
    pipeline: str | None

    def as_dict(self) -> dict:
        return {
            "run": self.run,
            "model": self.model,
            "recipe": self.recipe,
            "backends": self.backends,
            "steps": self.steps,
            "batch": self.batch,
            "step_seconds": self.step_seconds,
            "modeled_step_seconds": self.modeled_step_seconds,
            "integer": self.integer,
            "energy_device": self.energy_device,
            "pipeline": self.pipeline,
            "ops": [r.as_dict() for r in self.ops],
            "layers": [r.as_dict() for r in self.layers],
            "between_ops": self.between.as_dict(),
            "total": self.total.as_dict(),
        }


def energy_device(spec: str | None):
    """The coefficients the energy share is taken with: the run's `energy: estimate:DEVICE`,
    else the phone the project targets (sd865), as the estimate meter does."""
    kind, _, arg = (spec or "").partition(":")
    return DEVICES.get(arg if kind == "estimate" and arg else "sd865")


def build(
    recorder, plan, *, run: str = "", model: str = "", recipe=None, device=None, energy_spec: str | None = None
) -> Profile:
    """The Profile of `recorder`'s steps, which ran `plan` (plan.Plan); `recipe` the run's
    (config.Recipe: integer or float MACs), `device` its config.DeviceProfile (the modeled
    DSP time; None: not modeled)."""
    graph = plan.graph
    integer = bool(getattr(recipe, "integer", True))
    coeffs = energy_device(energy_spec)
    rows, ran = _op_rows(recorder, plan, device, coeffs, integer)
    steps = [s.seconds if s.stats is None else s.stats.time_s for s in recorder.steps]
    measured = sum(steps)
    ops = sorted(rows.values(), key=lambda r: r.seconds, reverse=True)
    left = measured - sum(r.seconds for r in ops)
    between = Row(BETWEEN_OPS if left >= 0 else OVERLAP, "", "", "executor", "host", seconds=left)
    layers = _roll_up(ops, graph, ran)
    total = _sum_rows(ops, Row("step (measured)", "", "", "", _backends(ops), calls=sum(r.calls for r in ops)))
    total.seconds, total.tensor_bytes = measured, _tensor_bytes(graph, ran.values())
    energy = total.energy_j or 0.0
    for row in (*ops, *layers, between, total):
        row.share = row.seconds / measured if measured > 0 else 0.0
        if row.energy_j is not None and energy > 0:
            row.energy_share = row.energy_j / energy
    last = recorder.steps[-1].stats if recorder.steps else None
    pipeline = getattr(last, "pipeline", None) or f"serial ({plan.micro_batches_reason})"
    modeled = [modeled_step_seconds(recorder.step_events(s.index), device) for s in recorder.steps]
    return Profile(
        run,
        model,
        getattr(recipe, "name", str(recipe or "")),
        total.backend,
        len(recorder.steps),
        graph.batch,
        steps,
        None if None in modeled else modeled,
        ops,
        layers,
        between,
        total,
        integer,
        coeffs.name if coeffs else None,
        pipeline,
    )


def _op_rows(recorder, plan, device, coeffs, integer: bool) -> tuple[dict, dict]:
    """One Row per op that ran, summed over its calls (time, MACs, bytes moved, the DSP's
    packets and modeled time, energy), and the ops by name."""
    graph = plan.graph
    rows: dict[str, Row] = {}
    ran: dict[str, object] = {}  # op name -> graph.Op
    for event in recorder.events:
        op = event.op
        row = rows.get(op.name)
        if row is None:
            row = rows[op.name] = Row(
                op.name,
                op.kind,
                op.layer,
                role(op),
                event.backend,
                tensor_bytes=_tensor_bytes(graph, [op]),
                workspace_bytes=op_workspace(graph, op, graph.batch),
            )
            ran[op.name] = op
        elif event.backend not in row.backend.split("+"):
            row.backend += "+" + event.backend
        share, whole = event.rows or (1, 1)
        macs = op.macs * share // whole
        row.calls += 1
        row.seconds += event.seconds
        row.macs += macs
        moved = plan.op_bytes(op, event.rows)
        row.bytes_moved += moved
        if event.dsp_costs or event.dsp_calls:
            row.dsp_packets += sum(c[1] for c in event.dsp_costs)
            row.dsp_critical_packets += sum(c[2] for c in event.dsp_costs)
            row.dsp_calls += event.dsp_calls
            modeled = modeled_seconds(event, device)
            if modeled is not None:
                row.dsp_model_s = (row.dsp_model_s or 0.0) + modeled
        joules = _joules(coeffs, event.backend, macs, integer, moved)
        if joules is not None:
            row.energy_j = (row.energy_j or 0.0) + joules
    return rows, ran


def _tensor_bytes(graph, ops) -> int:
    """Bytes of the distinct tensors `ops` read and write, as the memory plan sizes them."""
    sized = {}
    for op in ops:
        for t in (*op.inputs, *op.outputs):
            if t in graph.tensors and t not in sized:
                sized[t] = value_bytes(graph, op, t)
    return sum(sized.values())


def _joules(coeffs, backend: str, macs: int, integer: bool, moved: int) -> float | None:
    if coeffs is None:
        return None
    work = WorkCounts({backend: macs} if integer and macs else {}, 0 if integer else 2 * macs, moved)
    try:
        parts = parts_joules(coeffs, work)
    except MeterError:  # no coefficient for this backend on that device (x86 has no DSP)
        return None
    return sum(parts.values())


def _backends(rows) -> str:
    seen = []
    for row in rows:
        for name in row.backend.split("+"):
            if name not in seen:
                seen.append(name)
    return "+".join(seen)


def _sum_rows(rows, into: Row) -> Row:
    for row in rows:
        into.seconds += row.seconds
        into.macs += row.macs
        into.bytes_moved += row.bytes_moved
        into.workspace_bytes = max(into.workspace_bytes, row.workspace_bytes)
        into.dsp_packets += row.dsp_packets
        into.dsp_critical_packets += row.dsp_critical_packets
        into.dsp_calls += row.dsp_calls
        if row.dsp_model_s is not None:
            into.dsp_model_s = (into.dsp_model_s or 0.0) + row.dsp_model_s
        if row.energy_j is not None:
            into.energy_j = (into.energy_j or 0.0) + row.energy_j
    return into


def _roll_up(ops, graph, ran: dict) -> list:
    """One row per layer: its ops' sums (tensors: the distinct ones; the workspace: the
    largest of one op), sorted by time."""
    by_layer: dict[str, list] = {}
    for row in ops:
        by_layer.setdefault(row.layer, []).append(row)
    layers = []
    for layer, rows in by_layer.items():
        roles = sorted({r.role for r in rows}, key=ROLES.index)
        kinds = sorted({r.kind.split(".")[-1] for r in rows})
        tensors = _tensor_bytes(graph, [ran[r.name] for r in rows])
        layers.append(
            _sum_rows(
                rows,
                Row(
                    layer,
                    ",".join(kinds),
                    layer,
                    ", ".join(roles),
                    _backends(rows),
                    calls=sum(r.calls for r in rows),
                    tensor_bytes=tensors,
                ),
            )
        )
    return sorted(layers, key=lambda r: r.seconds, reverse=True)
