"""`dsptrain profile`'s numbers end to end: a profiled step's op times add up to the
measured step, every op of LeNet-5 and ResNet-18 steps appears once per call (serial,
batch-split and co-scheduled), the trace is the Chrome trace event format with no two
events of a lane overlapping, and profiling changes no bit of training."""

import dataclasses
import json
import warnings

import dsptrain
import numpy as np
import pytest
from dsptrain import data as datasets
from dsptrain.config import CONFIG_ROOT
from dsptrain.profile import build, record_steps, trace_events, write_trace
from dsptrain.train import Trainer


def _run(model="lenet5", batch=64, backend="cpu", recipe="niti", **scheduler):
    run = dsptrain.load_run(CONFIG_ROOT / "runs" / f"lenet-fmnist-{recipe}.yaml")
    run = dataclasses.replace(
        run,
        model=dataclasses.replace(run.model, name=model),
        backend=backend,
        data=dataclasses.replace(run.data, dataset="synthetic", train_limit=4 * batch),
        train=dataclasses.replace(run.train, batch_size=batch),
        scheduler=dataclasses.replace(run.scheduler, **scheduler),
    )
    return run


def _profiled(run, tmp_path, steps=2, warmup=1):
    trainer = Trainer(run, out_dir=tmp_path, progress=False)
    try:
        batches = [
            b for _, b in zip(range(warmup + steps), datasets.batches(trainer.train_data, run.train.batch_size, 0, 0))
        ]
        recorder = record_steps(trainer.executor, trainer.step, batches, warmup)
        return trainer, recorder
    finally:
        trainer.close()


def _calls(recorder):
    calls = {}
    for e in recorder.events:
        calls[e.op.name] = calls.get(e.op.name, 0) + 1
    return calls


def test_op_times_add_up_to_the_measured_step(tmp_path):
    # batch 256: the ops' time, not the executor's fixed Python time between them (which a
    # loaded machine stretches), is what the 5 % bound is about
    trainer, recorder = _profiled(_run(batch=256), tmp_path, steps=3)
    profile = build(recorder, recorder.plan, recipe=trainer.recipe, device=trainer.device)
    measured = sum(s.stats.time_s for s in recorder.steps)
    ops = sum(r.seconds for r in profile.ops)
    assert profile.total.seconds == pytest.approx(measured)
    assert abs(ops - measured) <= 0.05 * measured, (ops, measured)
    assert profile.between.seconds == pytest.approx(measured - ops)
    # the layer roll-up holds the same time and work as the ops
    assert sum(r.seconds for r in profile.layers) == pytest.approx(ops)
    assert sum(r.macs for r in profile.layers) == sum(r.macs for r in profile.ops) == profile.total.macs
    # the work counted per op is the step's, as the StepStats count it
    stats = [s.stats for s in recorder.steps]
    assert profile.total.macs == sum(sum(s.int8_macs.values()) for s in stats)
    assert profile.total.bytes_moved == sum(s.bytes_moved for s in stats)
    shares = [r.energy_share for r in profile.ops]
    assert all(s is not None and s >= 0 for s in shares) and sum(shares) == pytest.approx(1.0)
    assert [r.seconds for r in profile.ops] == sorted((r.seconds for r in profile.ops), reverse=True)


@pytest.mark.parametrize("model,batch", [("lenet5", 64), ("resnet18_nobn", 4)])
def test_every_op_appears_once_per_call(tmp_path, model, batch):
    trainer, recorder = _profiled(_run(model, batch), tmp_path, steps=2)
    graph = recorder.plan.graph
    assert _calls(recorder) == {op.name: 2 for op in graph.ops}
    profile = build(recorder, recorder.plan, recipe=trainer.recipe)
    assert {r.name: r.calls for r in profile.ops} == {op.name: 2 for op in graph.ops}
    assert {r.name for r in profile.layers} == {op.layer for op in graph.ops}
    roles = {r.name: r.role for r in profile.ops}
    first = graph.ops[0].layer
    assert roles[f"{first}.fwd"] == "forward" and roles[f"{first}.bwd_weight"] == "weight gradient"
    assert roles[f"{first}.update"] == "update" and roles["loss.grad"] == "loss"


@pytest.mark.parametrize("recipe", ["niti", "fp32", "octo", "wageubn", "afp", "mls", "fp8"])
def test_every_recipe_op_has_its_role(recipe):
    """Each recipe's quantisers, products (by pass), loss and updates get their role."""
    from dsptrain.graph import lower
    from dsptrain.models import build_model
    from dsptrain.profile import role

    run = dsptrain.load_run(CONFIG_ROOT / "runs" / f"lenet-fmnist-{recipe}.yaml")
    graph = lower(build_model("lenet5"), run.recipe, 8, True)
    passes = {"forward": "forward", "backward_data": "backward data", "backward_weight": "weight gradient"}
    for op in graph.ops:
        expected = (
            "update"
            if op.phase == "update"
            else passes[op.product.pass_]
            if op.product is not None
            else "quantiser"
            if ".quant_" in op.kind
            else "loss"
            if op.phase == "loss"
            else None
        )
        if expected is not None:
            assert role(op) == expected, (recipe, op.name, op.kind)
    assert (recipe in ("niti", "fp32")) == all(role(op) != "quantiser" for op in graph.ops)


def test_float_recipe_roles_and_work(tmp_path):
    """Under Octo (an emulated recipe: float tensors, int8 products) the quantisers are their
    own role, and the MACs counted per op are the float work the StepStats count."""
    trainer, recorder = _profiled(_run(recipe="octo"), tmp_path)
    profile = build(recorder, recorder.plan, recipe=trainer.recipe)
    roles = {r.name: r.role for r in profile.ops}
    assert roles["conv1.quant_w"] == roles["conv2.quant_err"] == "quantiser"
    assert roles["conv2.bwd_data"] == "backward data" and roles["conv2.w.update"] == "update"
    assert not profile.integer
    assert 2 * profile.total.macs == sum(s.stats.fp32_flops for s in recorder.steps) > 0
    assert {r.name: r.calls for r in profile.ops} == {op.name: 2 for op in recorder.plan.graph.ops}


def test_sliced_ops_appear_once_per_slice(tmp_path):
    """Under a memory plan with micro-batches of 16 rows, a row-local op runs once per slice:
    each slice is a call with its rows noted, and the work adds up to the Step's count."""
    run = _run()
    run = dataclasses.replace(run, memory=dataclasses.replace(run.memory, arena=True, micro_batch=16, recompute="none"))
    trainer, recorder = _profiled(run, tmp_path, steps=2)
    sliced = [e for e in recorder.events if e.rows]
    assert sliced and all(e.rows == (16, 64) for e in sliced)
    calls = _calls(recorder)
    graph = recorder.plan.graph
    per_step = {op.name: (4 if graph.row_local(op) and not op.is_alias() else 1) for op in graph.ops}
    stats = [s.stats for s in recorder.steps]
    # a slice whose shift was smaller than the op's common one runs again (StepStats.rerun_slices)
    assert set(calls) == set(per_step) and all(calls[name] >= 2 * n for name, n in per_step.items())
    assert sum(calls.values()) == 2 * sum(per_step.values()) + sum(s.rerun_slices for s in stats)
    profile = build(recorder, recorder.plan, recipe=trainer.recipe)
    assert profile.total.macs == sum(sum(s.int8_macs.values()) for s in stats)
    assert profile.total.bytes_moved == sum(s.bytes_moved for s in stats)


def _check_trace(events, recorder):
    """The trace event format's rules, every recorded call once on a lane of the measured
    process (and once more on the modeled one, when there is one), no two events of a lane
    overlapping. Returns ({(pid, tid): lane name}, {pid: process name})."""
    json.loads(json.dumps(events))
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "cat", "args"} <= set(e)
        assert e["dur"] >= 0 and e["ts"] >= 0 and (e["pid"], e["tid"]) in names
    lanes = {}
    for e in complete:
        lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    for key, items in lanes.items():
        items.sort(key=lambda e: e["ts"])
        for a, b in zip(items, items[1:]):
            assert a["ts"] + a["dur"] <= b["ts"], (names[key], a["name"], b["name"])
    for pid in processes:
        calls = [e for e in complete if e["pid"] == pid and names[(pid, e["tid"])] != "steps"]
        assert len(calls) == len(recorder.events), processes[pid]
        assert sum(e["pid"] == pid and names[(pid, e["tid"])] == "steps" for e in complete) == len(recorder.steps)
    return names, processes


def test_trace_is_valid_and_lanes_do_not_overlap(tmp_path):
    trainer, recorder = _profiled(_run(), tmp_path)
    path = write_trace(recorder, tmp_path / "trace.json", trainer.device)
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ms"
    names, processes = _check_trace(data["traceEvents"], recorder)
    assert list(processes.values()) == ["measured (host clock)"]  # no DSP call: nothing to model
    assert set(names.values()) == {"steps", "cpu on MainThread"}


def test_serial_dsp_step_models_its_time(tmp_path, emulated_dsp_tools):
    """Without co-scheduling every call waits for the one before, so the modeled step is the
    DSP calls' modeled time plus the CPU calls' measured time, and the modeled process holds
    the DSP's modeled lane beside the CPU's."""
    run = _run(backend="dsp", batch=32, micro_batches=1, device="v66")
    trainer, recorder = _profiled(run, tmp_path, steps=1)
    names, processes = _check_trace(trace_events(recorder, trainer.device), recorder)
    assert sorted(processes.values()) == ["measured (host clock)", "modeled (DSP time from packets)"]
    modeled_lanes = {n for (pid, _), n in names.items() if processes[pid].startswith("modeled")}
    assert {"dsp on MainThread (modeled)", "cpu on MainThread", "steps"} <= modeled_lanes
    profile = build(recorder, recorder.plan, recipe=trainer.recipe, device=trainer.device)
    dsp = sum(r.dsp_model_s or 0.0 for r in profile.ops)
    cpu = sum(e.seconds for e in recorder.events if not e.dsp_costs)
    assert dsp == pytest.approx(recorder.steps[0].stats.dsp_model_s, rel=1e-9)
    # the same terms summed in another order (float): an op left out would move it by 1e-4 or more
    assert profile.modeled_step_seconds[0] == pytest.approx(dsp + cpu, rel=1e-7)


def test_co_scheduled_trace_shows_the_dsp_worker_and_modeled_lane(tmp_path, emulated_dsp_tools):
    """Under co-scheduling the DSP's calls run on the DSP queue's thread, a lane of its own
    beside the CPU's; their packets give the modeled lane; each micro-batch slice is a call."""
    run = _run(backend="dsp", batch=32, micro_batches=2, co_schedule=True, device="v66")
    trainer, recorder = _profiled(run, tmp_path, steps=1)
    assert recorder.plan.micro_batches == 2
    names, _ = _check_trace(trace_events(recorder, trainer.device), recorder)
    lanes = set(names.values())
    assert any(n.startswith("dsp on dsptrain-dsp") and not n.endswith("(modeled)") for n in lanes), lanes
    assert any(n.startswith("dsp on dsptrain-dsp") and n.endswith("(modeled)") for n in lanes), lanes
    assert "cpu on MainThread" in lanes
    dsp_events = [e for e in recorder.events if e.backend == "dsp"]
    assert dsp_events and all(e.dsp_costs and e.dsp_calls >= 1 for e in dsp_events if e.op.hooks)
    assert all(e.rows is not None for e in recorder.events if e.op.phase == "forward")
    profile = build(recorder, recorder.plan, recipe=trainer.recipe, device=trainer.device)
    stats = recorder.steps[0].stats
    # the per-op modeled DSP times add up to the Step's own (cost.dsp_model_time over the step's log)
    assert profile.total.dsp_model_s == pytest.approx(stats.dsp_model_s, rel=1e-9)
    assert profile.total.dsp_packets == sum(r.dsp_packets for r in profile.ops) > 0
    # the DSP worker runs one call at a time: the modeled step is at least the DSP's modeled time
    assert profile.modeled_step_seconds[0] >= stats.dsp_model_s * (1 - 1e-9)


def test_profiling_changes_no_bit(tmp_path):
    """A profiled step and a plain one from the same weights end with the same weights."""
    run = _run()
    ends = []
    for profiled in (False, True):
        trainer = Trainer(run, out_dir=tmp_path / str(profiled), progress=False)
        try:
            batches = [b for _, b in zip(range(2), datasets.batches(trainer.train_data, 64, 0, 0))]
            if profiled:
                record_steps(trainer.executor, trainer.step, batches)
            else:
                for images, labels in batches:
                    trainer.step(images, labels)
            assert trainer.executor.profiler is None
            ends.append({k: (v.q.copy(), v.e) for k, v in trainer.state.items()})
        finally:
            trainer.close()
    for name, (q, e) in ends[0].items():
        assert np.array_equal(q, ends[1][name][0]) and e == ends[1][name][1], name


def test_every_op_of_a_mobilenet_v2_step_appears_once_per_call(tmp_path):
    """torchvision's MobileNetV2 (tests/zoo_torch/, reduced), imported through from_torch
    and profiled under FP32: depthwise and pointwise convolutions, batch norms, ReLU6."""
    torch = pytest.importorskip("torch")
    from tests.zoo_torch import build as build_torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the classifier's bias, kept: FP32 trains it
        model = dsptrain.from_torch(build_torch("mobilenet_v2"), torch.zeros(2, 3, 32, 32))
    run = _run(batch=8, recipe="fp32")
    trainer = Trainer(run, model=model, out_dir=tmp_path, progress=False)
    try:
        batches = [b for _, b in zip(range(3), datasets.batches(trainer.train_data, 8, 0, 0))]
        recorder = record_steps(trainer.executor, trainer.step, batches, 1)
    finally:
        trainer.close()
    graph = recorder.plan.graph
    assert _calls(recorder) == {op.name: 2 for op in graph.ops}
    kinds = {op.kind for op in graph.ops}
    assert any("gconv" in k or "dwconv" in k for k in kinds), sorted(kinds)
    profile = build(recorder, recorder.plan, recipe=trainer.recipe)
    assert {r.name: r.calls for r in profile.ops} == {op.name: 2 for op in graph.ops}
