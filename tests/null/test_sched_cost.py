"""The scheduler's cost model (micro-batch count, batch-split check), the controller's
staggered checks, and the new scheduler and profile keys (no native code)."""

import dataclasses

import dsptrain
import pytest
from dsptrain.config import ConfigError, SchedulerConfig, load_device, load_recipe
from dsptrain.cost import micro_batch_count
from dsptrain.graph import lower
from dsptrain.models import build_model
from dsptrain.plan import choose_micro_batches, place
from dsptrain.rescale import RescaleController


class _Backend:
    """Takes every op but those whose kind contains a word of `declines`."""

    def __init__(self, name, blocks_for_cache=False, declines=()):
        self.name, self.blocks_for_cache, self.declines = name, blocks_for_cache, declines

    def supports(self, op):
        if any(word in op.kind for word in self.declines):
            return False, "test: declined"
        return True, "test"


def _plan(backends, profile, model="lenet5"):
    graph = lower(build_model(model, 10), load_recipe("niti"), 64, True)
    return place(graph, backends, co_schedule=True).replace(device=profile, batch_split=True)


def _profile(tmp_path, text, name="p"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\n{text}")
    return load_device(str(path))


def test_micro_batch_count_follows_the_cpu_share(tmp_path):
    both = {"dsp": _Backend("dsp", declines=("loss",)), "cpu": _Backend("cpu")}
    # the shipped profile: LeNet's CPU share (loss, updates) is tiny next to the calls an
    # extra micro-batch costs, so the model keeps the step serial, and says why in numbers
    plan = _plan(both, load_device("v66"))
    m, why = micro_batch_count(plan.pipeline_work(), plan.device, 64)
    assert m == 1 and "cost model (v66)" in why and "serial" in why
    # the DSP declines pooling and ReLU (Mandheling's DSP-unfriendly ops), the processors
    # are equally fast and calls are free: a per-row CPU stage to overlap, so it pays
    even = _profile(
        tmp_path,
        "dsp: {macs_per_s: 1.0e+9, bytes_per_s: 1.0e+8, call_s: 1.0e-9}\n"
        "cpu: {macs_per_s: 1.0e+9, bytes_per_s: 1.0e+8, call_s: 1.0e-9}\n",
    )
    plan = _plan({"dsp": _Backend("dsp", declines=("loss", "pool", "relu")), "cpu": _Backend("cpu")}, even)
    m, why = micro_batch_count(plan.pipeline_work(), even, 64)
    assert m > 1, why
    # the same with expensive calls: each extra micro-batch repeats them, serial again
    dear = _profile(
        tmp_path,
        "dsp: {macs_per_s: 1.0e+9, bytes_per_s: 1.0e+8, call_s: 1.0e-2}\n"
        "cpu: {macs_per_s: 1.0e+9, bytes_per_s: 1.0e+8, call_s: 1.0e-2}\n",
        "dear",
    )
    assert micro_batch_count(plan.pipeline_work(), dear, 64)[0] == 1
    # no DSP: nothing to overlap with, whatever the speeds
    alone = _plan({"cpu": _Backend("cpu")}, even)
    assert micro_batch_count(alone.pipeline_work(), even, 64)[0] == 1


def test_choose_micro_batches_honours_the_switches():
    both = {"dsp": _Backend("dsp", declines=("loss",)), "cpu": _Backend("cpu")}
    plan = _plan(both, load_device("v66"))
    plan = choose_micro_batches(plan, SchedulerConfig(micro_batches=3), True)
    assert plan.micro_batches == 3 and "scheduler.micro_batches" in plan.micro_batches_reason
    plan = choose_micro_batches(plan, SchedulerConfig(micro_batches=3, co_schedule=False), True)
    assert plan.micro_batches == 1
    plan = choose_micro_batches(plan, SchedulerConfig(micro_batches=3), False)  # not sliceable
    assert plan.micro_batches == 1
    plan = choose_micro_batches(plan, SchedulerConfig(), True)
    assert plan.micro_batches == micro_batch_count(plan.pipeline_work(), plan.device, 64)[0]


def test_split_check_declines_when_calls_cost_more_than_the_cache_saves(tmp_path):
    small = "dsp: {vtcm: 64KiB, l2: 128KiB, call_s: %s}\ncpu: {l2: 64KiB, call_s: %s}\n"
    cheap = _plan({"dsp": _Backend("dsp"), "cpu": _Backend("cpu")}, _profile(tmp_path, small % ("1.0e-9", "1.0e-9")))
    dear = _plan({"dsp": _Backend("dsp"), "cpu": _Backend("cpu")}, _profile(tmp_path, small % ("1.0", "1.0"), "dear"))
    split = [op for op in cheap.graph.ops if cheap.split_rows(op, 64)]
    assert split
    for op in split:
        assert dear.split_rows(op, 64) is None
        assert dear.split_reason(op, 64).startswith("not split") and "cost model" in dear.split_reason(op, 64)
        assert cheap.split_reason(op, 64).startswith("split")


def test_split_on_a_backend_that_blocks_for_the_cache_bounds_only_accumulators(tmp_path):
    # compute as good as free: every product is memory-bound, so only the blocking decides
    profile = _profile(tmp_path, "cpu: {l2: 64KiB, call_s: 1.0e-9, macs_per_s: 1.0e+18}\n")
    plain = _plan({"cpu": _Backend("cpu")}, profile)
    blocked = _plan({"cpu": _Backend("cpu", blocks_for_cache=True)}, profile)
    weight_grads = [op for op in plain.graph.ops if op.name.endswith("bwd_weight")]
    assert any(plain.split_rows(op, 64) for op in weight_grads)  # operands miss the L2
    for op in weight_grads:
        assert blocked.split_rows(op, 64) is None and "block" in blocked.split_reason(op, 64)
    for op in blocked.graph.ops:
        rows = blocked.split_rows(op, 64)
        if rows:  # a chunk's accumulators fit the L2
            out = blocked.graph.tensors[op.outputs[0]]
            assert 4 * out.nbytes // 64 * rows <= profile.size("cpu.l2")


def test_checks_are_staggered_across_ops():
    recipe = load_recipe("niti")
    graph = lower(build_model("lenet5", 10), recipe, 8, True)
    ctl = RescaleController(recipe)
    names = [op.name for op in graph.ops if ctl.policy(op)]
    hi = recipe.tensors.activations.rescale.max_interval
    due, last = [], {}
    for step in range(400):
        given = ctl.shifts_for(step, graph) or {}
        now = [n for n in names if n not in given]
        due.append(len(now))
        for n in now:
            assert step - last.get(n, step) <= hi, n  # never later than the interval
            last[n] = step
        ctl.observe(step, graph, {n: 7 for n in names}, given)
    settled = due[2 * hi :]
    # stable shifts: most steps have no check due, and a step rarely has more than one
    assert sum(d == 0 for d in settled) > 0.8 * len(settled)
    assert max(settled) <= 2 and sum(d > 1 for d in settled) < 0.05 * len(settled)


def test_bad_scheduler_and_profile_values_name_file_and_key(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("name: r\nrecipe: niti\nscheduler: {micro_batches: 0}\n")
    with pytest.raises(ConfigError, match="scheduler.micro_batches") as info:
        dsptrain.load_run(run)
    assert "run.yaml" in str(info.value)
    run.write_text("name: r\nrecipe: niti\nscheduler: {micro_batches: many}\n")
    with pytest.raises(ConfigError, match="'many'"):
        dsptrain.load_run(run)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndsp: {call_s: -1}\n")
    with pytest.raises(ConfigError, match="dsp.call_s") as info:
        load_device(str(bad))
    assert "bad.yaml" in str(info.value) and "-1" in str(info.value)
    assert dataclasses.replace(SchedulerConfig(), micro_batches=2).micro_batches == 2


def test_split_saves_only_what_the_op_spent_on_memory(tmp_path):
    """The roofline: a chunk kept in fast memory saves DDR time only where that time exceeded
    the op's compute; a compute-bound product is not split however many bytes it streams."""
    memory_bound = _profile(tmp_path, "cpu: {l2: 64KiB, call_s: 1.0e-9, macs_per_s: 1.0e+18}\n", "mem")
    compute_bound = _profile(tmp_path, "cpu: {l2: 64KiB, call_s: 1.0e-9, macs_per_s: 1.0e+3}\n", "flops")
    fast = _plan({"cpu": _Backend("cpu")}, memory_bound)
    slow = _plan({"cpu": _Backend("cpu")}, compute_bound)
    split = [op for op in fast.graph.ops if fast.split_rows(op, 64)]
    assert split
    for op in split:
        assert slow.split_rows(op, 64) is None and slow.split_reason(op, 64).startswith("not split")
