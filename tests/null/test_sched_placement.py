"""Placement by the device profile (scheduler.placement: profile | first): the ops whose
hooks the profile's dsp.bad_at lists go to the CPU, with the reason; the switches and
the profile key are validated (no native code)."""

import dsptrain
import pytest
from dsptrain.config import ConfigError, SchedulerConfig, load_device, load_recipe
from dsptrain.graph import lower
from dsptrain.models import build_model
from dsptrain.plan import choose_micro_batches, place


class _Backend:
    """Takes every op but those whose hooks include one of `lacks`."""

    def __init__(self, name, lacks=()):
        self.name, self.lacks = name, lacks

    def supports(self, op):
        if any(h in self.lacks for h in op.hooks):
            return False, "test: lacks a hook"
        return True, f"test {self.name}"


def _graph(model="lenet5"):
    return lower(build_model(model, 10), load_recipe("niti"), 64, True)


def _profile(tmp_path, text, name="p"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\n{text}")
    return load_device(str(path))


def _both():
    return {"dsp": _Backend("dsp", lacks=("niti_loss_grad_s8",)), "cpu": _Backend("cpu")}


def test_profile_placement_moves_the_listed_hooks_to_the_cpu():
    graph, profile = _graph(), load_device("v66")
    bad = set(profile.dsp.bad_at)
    assert bad, "the shipped profile lists no op the DSP is bad at"
    listed = [op for op in graph.ops if bad & set(op.hooks)]
    assert listed, "LeNet-5 has none of the listed ops"
    by_profile = place(graph, _both(), device=profile, placement="profile")
    by_order = place(graph, _both(), device=profile, placement="first")
    for op in graph.ops:
        p = by_profile.placement[op.name]
        if op in listed:
            assert p.backend == "cpu", op.name
            assert any(
                b == "dsp" and "the DSP is bad at" in why and profile.dsp.bad_at[h] in why
                for b, why in p.declined
                for h in bad & set(op.hooks)
            ), p.declined
            assert by_order.backend_of(op) == "dsp", op.name
        else:  # nothing else moves
            assert p.backend == by_order.backend_of(op), op.name
    text = by_profile.describe()
    assert sum("the DSP is bad at" in line for line in text.splitlines()) == len(listed)


def test_the_list_comes_from_the_profile(tmp_path):
    graph = _graph()
    relu_bwd = _profile(tmp_path, 'dsp: {bad_at: {relu_bwd_s8: "test: says so"}}\n')
    plan = place(graph, _both(), device=relu_bwd, placement="profile")
    moved = {op.name for op in graph.ops if plan.backend_of(op) == "cpu"}
    expected = {op.name for op in graph.ops if "relu_bwd_s8" in op.hooks or "niti_loss_grad_s8" in op.hooks}
    assert moved == expected and any(n.startswith("relu") for n in moved)
    empty = _profile(tmp_path, "dsp: {}\n", "empty")
    plan = place(graph, _both(), device=empty, placement="profile")
    assert all(plan.backend_of(op) == "dsp" for op in graph.ops if "niti_loss_grad_s8" not in op.hooks)


def test_without_a_cpu_backend_the_dsp_keeps_them():
    graph, profile = _graph(), load_device("v66")
    backends = {"dsp": _Backend("dsp", lacks=("niti_loss_grad_s8",)), "ref": _Backend("ref")}
    plan = place(graph, backends, device=profile, placement="profile")
    for op in graph.ops:
        if set(profile.dsp.bad_at) & set(op.hooks):
            assert plan.backend_of(op) == "dsp", op.name


def test_cpu_only_ops_still_forces_and_says_so(monkeypatch):
    graph, profile = _graph(), load_device("v66")
    monkeypatch.setenv("DSPTRAIN_CPU_ONLY_OPS", r"^fc1\.fwd$")
    plan = place(graph, _both(), device=profile, placement="profile")
    fc1 = graph.op("fc1.fwd")
    assert plan.backend_of(fc1) == "cpu"
    assert "DSPTRAIN_CPU_ONLY_OPS" in plan.placement["fc1.fwd"].declined[0][1]
    assert all(plan.backend_of(op) == "cpu" for op in graph.ops if set(profile.dsp.bad_at) & set(op.hooks))


def test_placed_work_on_the_cpu_is_what_co_scheduling_overlaps(tmp_path):
    # equal speeds and free calls: with max-pool (and ReLU's backward) on the CPU there is a
    # per-row CPU stage and the cost model pipelines; with every op on the DSP it does not
    text = (
        "dsp: {macs_per_s: 1.0e+9, bytes_per_s: 1.0e+8, call_s: 1.0e-9,\n"
        '      bad_at: {maxpool_s8: "t", maxpool_bwd_s8: "t", relu_bwd_s8: "t"}}\n'
        "cpu: {macs_per_s: 1.0e+9, bytes_per_s: 1.0e+8, call_s: 1.0e-9}\n"
    )
    even = _profile(tmp_path, text, "even")
    counts = {}
    for placement in ("profile", "first"):
        plan = place(_graph(), _both(), co_schedule=True, device=even, placement=placement)
        plan = choose_micro_batches(plan, SchedulerConfig(placement=placement), True)
        counts[placement] = plan.micro_batches
        assert "cost model (even)" in plan.micro_batches_reason
    assert counts["profile"] > 1 and counts["profile"] > counts["first"], counts


def test_bad_placement_values_name_file_key_and_value(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("name: r\nrecipe: niti\nscheduler: {placement: cheapest}\n")
    with pytest.raises(ConfigError, match="scheduler.placement") as info:
        dsptrain.load_run(run)
    assert "run.yaml" in str(info.value) and "'cheapest'" in str(info.value)
    run.write_text("name: r\nrecipe: niti\nscheduler: {placement: first}\n")
    assert dsptrain.load_run(run).scheduler.placement == "first"
    assert SchedulerConfig().placement == "profile"
    for text, needle in (
        ('dsp: {bad_at: {maxpool: "x"}}\n', "'maxpool'"),
        ('dsp: {bad_at: {maxpool_s8: ""}}\n', "reason"),
        ("dsp: {bad_at: [maxpool_s8]}\n", "mapping"),
    ):
        with pytest.raises(ConfigError, match="dsp.bad_at") as info:
            _profile(tmp_path, text, "bad")
        assert "bad.yaml" in str(info.value) and needle in str(info.value), str(info.value)
    with pytest.raises(ValueError, match="placement"):
        place(_graph(), _both(), placement="cheapest")
