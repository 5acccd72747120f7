"""Self-adaptive rescaling's controller, the requantize saturation rule on the reference
backend, device profiles and the batch-split sizes they imply (no native code)."""

import dataclasses

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.config import ConfigError, load_device, load_recipe
from dsptrain.graph import lower
from dsptrain.models import build_model
from dsptrain.numerics import activation_shift
from dsptrain.plan import place, working_set
from dsptrain.rescale import RescaleController


def test_ref_requantize_given_shift_gives_way_only_when_it_would_saturate():
    be, rng = RefBackend(), np.random.default_rng(1)
    acc = rng.integers(-5000, 5000, 333).astype(np.int32)
    need = activation_shift(be.absmax(acc))
    dynamic = be.requantize(acc, "round", None)
    assert dynamic[1] == need
    for s in range(0, need + 1):  # too small (or exact): the estimate is used
        q, used = be.requantize(acc, "round", None, s)
        assert used == need and np.array_equal(q, dynamic[0])
    q, used = be.requantize(acc, "round", None, need + 2)  # larger: used as given
    assert used == need + 2 and np.array_equal(q, be.shift_round(acc, need + 2, "round", None))


def _graph():
    recipe = load_recipe("niti")
    return recipe, lower(build_model("lenet5", 10), recipe, 8, True)


def test_controller_grows_interval_while_stable_and_resets_on_a_move():
    recipe, graph = _graph()
    ctl = RescaleController(recipe)
    op = next(o for o in graph.ops if o.name == "conv1.fwd")
    hi = recipe.tensors.activations.rescale.max_interval
    checks, step = [], 0
    for step in range(300):
        given = ctl.shifts_for(step, graph) or {}
        if op.name not in given:
            checks.append(step)
        ctl.observe(step, graph, {op.name: 9}, given)
    gaps = np.diff(checks)
    assert list(gaps[:4]) == [1, 2, 4, 8] and gaps.max() == hi
    state = ctl.ops[op.name]
    assert state.skipped > 250 and ctl.skipped_fraction() > 0.9
    # a jump up while given: caught in the same step, the interval drops to min_interval
    given = {op.name: 9}
    ctl.observe(step + 1, graph, {op.name: 11}, given)
    assert state.shift == 11 and state.interval == recipe.tensors.activations.rescale.min_interval
    assert state.fallbacks == 1 and op.name not in (ctl.shifts_for(step + 2, graph) or {})


def test_controller_off_or_dynamic_policy_gives_nothing():
    recipe, graph = _graph()
    off = RescaleController(recipe, enabled=False)
    off.observe(0, graph, {"conv1.fwd": 3}, None)
    assert off.shifts_for(1, graph) is None
    dyn = dataclasses.replace(
        recipe,
        tensors=dataclasses.replace(
            recipe.tensors,
            activations=dataclasses.replace(
                recipe.tensors.activations,
                rescale=dataclasses.replace(recipe.tensors.activations.rescale, policy="dynamic"),
            ),
        ),
    )
    ctl = RescaleController(dyn)
    for step in range(5):
        ctl.observe(step, graph, {"conv1.fwd": 3, "fc3.bwd_data": 2}, ctl.shifts_for(step, graph))
    given = ctl.shifts_for(5, graph) or {}
    assert "conv1.fwd" not in given and "fc3.bwd_data" in given  # errors still adapt


def test_device_profiles_load_and_bad_values_name_file_and_key(tmp_path):
    v66 = load_device("v66")
    assert v66.size("dsp.vtcm") == 256 << 10 and v66.size("dsp.l2") == 1 << 20
    assert load_device("sd865").size("cpu.l2") == 512 << 10
    assert load_device("host").size("cpu.l2") >= 4096
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndsp: {vtcm: lots, l2: 1MiB}\n")
    with pytest.raises(ConfigError, match="dsp.vtcm") as info:
        load_device(str(bad))
    assert "bad.yaml" in str(info.value) and "lots" in str(info.value)
    bad.write_text("name: bad\ncpu: {l3: 1MiB}\n")
    with pytest.raises(ConfigError, match="cpu.l3"):
        load_device(str(bad))
    with pytest.raises(ConfigError, match="no such device"):
        load_device("pixel9000")


class _Takes:
    def __init__(self, name):
        self.name = name

    def supports(self, op):
        return True, "test"


@pytest.mark.parametrize("backend,keys", [("dsp", ("dsp.vtcm", "dsp.l2")), ("cpu", ("cpu.l2",))])
def test_split_rows_fit_the_profile(tmp_path, backend, keys):
    recipe = load_recipe("niti")
    graph = lower(build_model("lenet5", 10), recipe, 64, True)
    plan = place(graph, {backend: _Takes(backend)})
    profile = tmp_path / "tiny.yaml"
    # calls that cost nothing and compute as good as free (every product memory-bound): the
    # cost model lets every split that fits a memory pay
    profile.write_text(
        "name: tiny\ndsp: {vtcm: 64KiB, l2: 128KiB, call_s: 1.0e-9, macs_per_s: 1.0e+18}\n"
        "cpu: {l2: 64KiB, call_s: 1.0e-9, macs_per_s: 1.0e+18}\n"
    )
    plan = plan.replace(device=load_device(str(profile)), batch_split=True)
    split = 0
    for op in graph.ops:
        rows = plan.split_rows(op, 64)
        if rows is None:
            continue
        split += 1
        fixed, per_row = working_set(graph, op)
        caps = [plan.device.size(k) for k in keys]
        fits = [c for c in caps if fixed + per_row * rows <= c]  # the first memory a chunk fits
        assert 1 <= rows < 64 and fits and fixed + per_row * 64 > fits[0]  # split only what misses it
    assert split >= 3
    plan = plan.replace(device=load_device("v66"))  # bigger memories: fewer splits
    assert sum(plan.split_rows(op, 64) is not None for op in graph.ops) < split
