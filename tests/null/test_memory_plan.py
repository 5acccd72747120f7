"""The memory planner on its own: lifetimes, arena offsets, recompute schedules, budgets."""

import textwrap

import dsptrain
import numpy as np
import pytest
from dsptrain.config import MemoryConfig
from dsptrain.errors import ConfigError
from dsptrain.graph import lower
from dsptrain.memory.budget import Available, BudgetError, Schedule, parse_size, source_from_config
from dsptrain.memory.fit import Fitter
from dsptrain.memory.planner import Buffer, _assign_offsets, plan_memory
from dsptrain.memory.recompute import build_schedule, candidates, chen_sqrt_keep, variants
from dsptrain.models import build_model


@pytest.fixture(scope="module")
def graph():
    return lower(build_model("lenet5"), dsptrain.load_recipe("niti"), 32)


def _check_no_clobber(plan):
    """Replay the schedule over the arena: every read must find its value still in its buffer,
    and buffers alive at the same time must not share bytes."""
    holder, current = {}, {}
    for name, buf in plan.initial.items():
        holder[buf.index], current[name] = {name}, buf
    for i, step in enumerate(plan.schedule):
        for t in step.op.inputs:
            assert t in holder.get(current[t].index, ()), f"step {i} {step.op.name} reads {t}, clobbered"
        for t, buf in plan.writes[i].items():
            # a view (reshape) shares its input's bytes: both names stay readable
            holder[buf.index] = holder[buf.index] | {t} if step.op.is_alias() else {t}
            current[t] = buf
    for a in plan.buffers:
        for b in plan.buffers:
            if a.index < b.index and a.overlaps(b):
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)


def test_greedy_by_size_packs_disjoint_lifetimes_into_the_same_bytes():
    buffers = [Buffer(0, 1000, 0, 2), Buffer(1, 600, 3, 5), Buffer(2, 300, 1, 4), Buffer(3, 256, 6, 6)]
    _assign_offsets(buffers)
    assert buffers[0].offset == 0 and buffers[1].offset == 0 and buffers[3].offset == 0
    assert buffers[2].offset >= 1024  # alive with both large ones: above them


@pytest.mark.parametrize("mode", ["none", "sqrt", "all", "budget"])
def test_every_plan_keeps_each_value_until_its_last_read(graph, mode):
    for plan in variants(graph, mode):
        _check_no_clobber(plan)
        assert plan.arena_bytes >= plan.live_peak


def _read_before_rewritten(plan, i, t) -> bool:
    """Does a step after step i read the value of `t` that step i wrote?"""
    for step in plan.schedule[i + 1 :]:
        if t in step.op.inputs:
            return True
        if t in step.op.outputs:
            return False
    return False


@pytest.mark.parametrize("mode", ["none", "sqrt", "all", "budget"])
def test_a_value_no_step_reads_takes_no_slot(mode):
    """Octo's product op also makes its compensated output; re-run to rebuild the raw
    product for the compensation's backward, that second output is read by no step: it
    gets no arena slot (the runner drops it), so recomputing costs no more arena than
    with the two ops apart. Every slot a plan gives is read later or kept past the step;
    a value without one is read by no later step."""
    octo = lower(build_model("lenet5"), dsptrain.load_recipe("octo"), 64)
    persistent = {t for t, spec in octo.tensors.items() if spec.role in ("weight", "state")} | {octo.logits}
    dropped = 0
    for plan in variants(octo, mode):
        _check_no_clobber(plan)
        for i, step in enumerate(plan.schedule):
            for t in step.op.outputs:
                if t in plan.writes[i]:
                    assert _read_before_rewritten(plan, i, t) or t in persistent, (
                        f"{plan.label}: step {i} {step.op.name} keeps unread {t}"
                    )
                else:
                    dropped += step.recompute and step.op.kind == "octo.product_comp"
                    assert t not in persistent and not _read_before_rewritten(plan, i, t), (plan.label, step.op.name, t)
    if mode == "all":  # keep none: every product rebuilt for its raw product drops the other output
        assert dropped > 0
    if mode == "none":  # nothing rebuilt
        assert dropped == 0


@pytest.mark.parametrize("recipe", ["wageubn", "fp32"])
@pytest.mark.parametrize("mode", ["sqrt", "budget", "all"])
def test_batch_norm_updates_its_running_statistics_once_in_every_plan(recipe, mode):
    """Batch norm's forward rewrites its running mean and variance in place: a plan that
    re-ran it would apply the momentum update twice (and the rebuild walk used to recurse
    on the op's own outputs until Python's stack ran out)."""
    # batch 4: at 16 and up, with ReLU and max-pool one op (algorithms/_fusions.py), FP32's peak
    # (bn1's backward) holds no activation to evict, and the budget mode plans no recompute
    bn_graph = lower(build_model("lenet5_bn"), dsptrain.load_recipe(recipe), 4)
    stateful = [op for op in bn_graph.ops if op.phase == "forward" and op.updates_state()]
    assert {op.layer for op in stateful} == {"bn1", "bn2"}
    plans = variants(bn_graph, mode)
    assert any(plan.recomputed_ops for plan in plans)
    for plan in plans:
        _check_no_clobber(plan)
        assert [s.op.name for s in plan.schedule if s.op in stateful] == [op.name for op in stateful]


def test_recomputation_lowers_the_arena_and_reruns_forward_ops(graph):
    keep_all = plan_memory(graph, build_schedule(graph, set(candidates(graph))))
    sqrt = plan_memory(graph, build_schedule(graph, chen_sqrt_keep(graph)))
    none = plan_memory(graph, build_schedule(graph, set(), materialize=False))
    assert keep_all.recomputed_ops == 0 < sqrt.recomputed_ops < none.recomputed_ops
    assert none.arena_bytes < keep_all.arena_bytes
    assert all(s.op.phase == "forward" for s in none.schedule if s.recompute)


def test_weights_and_logits_live_all_step(graph):
    plan = variants(graph, "none")[0]
    n = len(plan.schedule)
    for name in graph.params:
        assert plan.initial[name].start == -1 and plan.initial[name].end == n
    assert graph.logits not in sum(plan.frees, [])


def test_every_chosen_plan_fits_its_budget(graph):
    fitter = Fitter(graph)
    cheapest = fitter.options[0]
    for budget in np.linspace(fitter.smallest().peak, cheapest.peak * 1.2, 12).astype(int):
        option = fitter.choose(int(budget))
        assert option.peak <= budget
        assert all(o.cost >= option.cost for o in fitter.options if o.peak <= budget)
    assert fitter.choose(None) is cheapest
    assert fitter.plain_peak() > cheapest.peak


def test_an_impossible_budget_names_the_smallest_feasible_one(graph):
    fitter = Fitter(graph)
    least = fitter.smallest().peak
    with pytest.raises(BudgetError, match=f"smallest feasible budget is .*{least} bytes"):
        fitter.choose(least - 1)
    assert fitter.choose(least).peak == least


def test_sizes_and_budget_sources(tmp_path):
    assert parse_size("64MB") == parse_size("64M") == parse_size("64MiB") == 64 << 20
    assert parse_size(1000) == 1000 and parse_size("1.5G") == 3 << 29
    with pytest.raises(ValueError):
        parse_size("lots")
    schedule = source_from_config(MemoryConfig(budget={0: "8MB", 10: 1 << 20}))
    assert isinstance(schedule, Schedule)
    assert schedule.at(0) == 8 << 20 and schedule.at(9) == 8 << 20 and schedule.at(10) == 1 << 20
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1000 kB\nMemAvailable:    1000 kB\n")
    assert Available("20%", meminfo).at(0) == 800 * 1024
    assert Available("100KB", meminfo).at(0, in_use=5) == 900 * 1024 + 5


@pytest.mark.parametrize(
    "value, key, says",
    [
        ('"lots"', "memory.budget", "'lots' is not a size"),
        ("0", "memory.budget", "at least 1 byte"),
        ("{-1: 64MB}", "memory.budget.-1", "step -1"),
        ("{0: 12XB}", "memory.budget.0", "'12XB' is not a size"),
        ("{}", "memory.budget", "empty schedule"),
    ],
)
def test_bad_budgets_name_file_key_and_value(tmp_path, value, key, says):
    path = tmp_path / "run.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        recipe: niti
        model: {{name: lenet5}}
        memory: {{budget: {value}}}
        """)
    )
    with pytest.raises(ConfigError) as info:
        dsptrain.load_run(path)
    assert str(path) in str(info.value) and key in str(info.value) and says in str(info.value)


def test_plan_command_prints_peak_breakdown_and_choice(tmp_path, capsys):
    from dsptrain.cli import main

    path = tmp_path / "run.yaml"
    path.write_text("recipe: niti\nmodel: {name: lenet5}\nmemory: {budget: 1MB}\n")
    assert main(["plan", str(path), "--batch", "64", "--backend", "ref"]) == 0
    out = capsys.readouterr().out
    for text in ("without the memory layer", "weights", "activations", "op workspace", "budget 1.0 MB"):
        assert text in out
    assert "backend scratch" not in out  # the reference backend keeps none
    assert main(["plan", str(path), "--budget", "10KB", "--backend", "ref"]) == 2
    assert "smallest feasible budget" in capsys.readouterr().err


def test_the_cost_grows_as_slices_shrink_with_the_weights_each_slice_streams_again(graph):
    from dsptrain.memory.fit import step_cost, whole_operand_bytes

    keep_all = variants(graph, "none")[0]
    sizes = [graph.batch >> k for k in range(graph.batch.bit_length())]
    costs = [step_cost(keep_all, m) for m in sizes]
    assert all(a < b for a, b in zip(costs, costs[1:])), list(zip(sizes, costs))
    fwd = next(op for op in graph.ops if op.kind.endswith("conv_fwd"))
    wgrad = next(op for op in graph.ops if op.kind.endswith("conv_bwd_weight"))
    weight = next(t for t in fwd.inputs if graph.tensors[t].role == "weight")
    assert whole_operand_bytes(graph, fwd) == graph.tensors[weight].nbytes
    grad = wgrad.outputs[0]  # written by every slice, then summed: twice, at its int32/int64 width
    assert whole_operand_bytes(graph, wgrad) == 2 * int(np.prod(graph.tensors[grad].shape)) * 4
    # one row per slice: every slice streams the weights again, calls multiply
    assert costs[-1] > 1.5 * costs[0]


def test_batch_norm_is_never_sliced_by_rows_and_a_micro_batched_step_matches(tmp_path):
    """Batch statistics couple the rows: the BN ops say so (rows: coupled) and run whole, so a
    step micro-batched by the memory layer gives the plain step's weights (float32 sums in
    another order: within 1e-5)."""
    import dataclasses

    run = dsptrain.load_run("configs/runs/lenet-fmnist-fp32.yaml")
    run = dataclasses.replace(run, model=dataclasses.replace(run.model, name="lenet5_bn"), energy="estimate")
    graph = lower(build_model("lenet5_bn", 10), run.recipe, 16)
    bn = [op for op in graph.ops if op.layer.startswith("bn")]
    assert bn and not any(graph.row_local(op) for op in bn)
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (16, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, 16)
    weights = {}
    for label, memory in (
        ("plain", MemoryConfig()),
        ("sliced", MemoryConfig(micro_batch=4, arena=True, recompute="none")),
    ):
        trainer = dsptrain.Trainer(
            dataclasses.replace(run, memory=memory), backend="ref", progress=False, out_dir=tmp_path / label
        )
        stats = trainer.step(images, labels)
        weights[label] = {k: np.array(v) for k, v in trainer.state.items()}
    assert stats.micro_batch == 4
    for name, value in weights["plain"].items():
        np.testing.assert_allclose(weights["sliced"][name], value, rtol=0, atol=1e-5, err_msg=name)


def test_plan_command_reports_the_plan_a_training_step_gets(tmp_path, capsys):
    """`dsptrain plan` and the Trainer share one assembly (train/assembly.py) and one plan
    builder (plan.Planner): frozen layers, the device profile and co-scheduling's
    micro-batches included, the command prints the memory report of the very plan the
    Trainer's step builds for that batch."""
    from dsptrain.cli import main
    from dsptrain.memory import describe

    path = tmp_path / "run.yaml"
    path.write_text(
        "recipe: niti\nmodel: {name: lenet5}\nmemory: {budget: 2MB, recompute: auto}\n"
        "train: {batch_size: 32, freeze: ['conv1']}\nscheduler: {co_schedule: true}\n"
    )
    assert main(["plan", str(path), "--backend", "ref"]) == 0
    out = capsys.readouterr().out
    run = dsptrain.load_run(path)
    trainer = dsptrain.Trainer(run, backend="ref", progress=False, out_dir=tmp_path / "out")
    try:
        plan = trainer.plans.get(32, True)
        report = describe(plan.fitter(run.memory.micro_batch, run.memory.recompute), trainer.budget)
    finally:
        trainer.close()
    assert "frozen (no weight gradient, no update, no activation kept for them): conv1" in out
    assert report in out, (report, out)
