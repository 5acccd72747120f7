"""Mandheling's scheduler end to end: the co-scheduled step equals the serial and the
unsplit step bit for bit (cpu and the emulated DSP, with ops placed by the device profile
-- max-pool on the CPU between DSP ops -- or all on the DSP); placement changes no bit;
batch splitting changes nothing;
adaptive rescaling is dynamic rescaling while shifts hold and follows a jump at once;
requantize's saturation rule is bit-exact on every backend."""

import dataclasses

import numpy as np
import pytest
from dsptrain import data as datasets
from dsptrain.execute import StepContext, StepStats
from dsptrain.numerics import RngKey

STEPS = 6


def _trainer(small_run, backend, tmp_path, device=None, **sched):
    from dsptrain.train import Trainer

    run = small_run(epochs=1, train_limit=64 * STEPS)
    run = dataclasses.replace(run, scheduler=dataclasses.replace(run.scheduler, **sched))
    if device:
        run = dataclasses.replace(run, scheduler=dataclasses.replace(run.scheduler, device=device))
    return Trainer(run, backend=backend, out_dir=tmp_path, progress=False)


def _batches(t, n=STEPS):
    return [b for _, b in zip(range(n), datasets.batches(t.train_data, 64, 0, 0))]


def _weights(t):
    return {k: v.q.copy() for k, v in t.state.items()}


def _one_step(t, plan, images, labels, shifts, threaded):
    """Run one step of `plan` from the trainer's weights with `shifts` given: (env, stats)."""
    ctx = StepContext(t.recipe, plan.graph, t.seed, 7, 0, len(labels), shifts=shifts)
    stats = StepStats(7, 0, len(labels))
    env = dict(t.state)
    env["input"] = t.algorithm.prepare_input(images)
    env["labels"] = np.asarray(labels, np.int64)
    t.executor.run(plan, env, ctx, stats=stats, threaded=threaded)
    return env, stats


def _same(a, b, names):
    for n in names:
        x, y = a[n], b[n]
        x, y = (x.q, y.q) if hasattr(x, "q") else (x, y)
        assert x.dtype == y.dtype and np.array_equal(x, y), n
        if hasattr(a[n], "e"):
            assert a[n].e == b[n].e, n


@pytest.mark.parametrize("backend,placement", [("cpu", "profile"), ("dsp", "profile"), ("dsp", "first")])
def test_pipelined_step_equals_serial_and_unsplit(small_run, tmp_path, backend, placement, request):
    if backend == "dsp":
        request.getfixturevalue("emulated_dsp_tools")
    t = _trainer(small_run, backend, tmp_path, micro_batches=1, placement=placement)
    try:
        ((images, labels),) = _batches(t, 1)
        plan = t.plans.get(64, True)
        assert plan.micro_batches == 1
        if backend == "dsp":
            # the profile's DSP-unfriendly ops sit between DSP ops: the slices hand over
            # between the DSP queue and this thread mid-forward and mid-backward
            bad = [op for op in plan.graph.ops if set(t.device.dsp.bad_at) & set(op.hooks)]
            assert bad
            assert {plan.backend_of(op) for op in bad} == {"cpu" if placement == "profile" else "dsp"}
        base, stats = _one_step(t, plan, images, labels, None, True)  # dynamic shifts, unsplit
        assert stats.pipeline is None
        shifts = dict(stats.shifts)
        requant = sorted(shifts)
        assert len(requant) >= 5
        due = requant[::3]  # range checks due at these ops: the slices sync there
        cases = {
            "all given": shifts,
            "some due": {k: v for k, v in shifts.items() if k not in due},
            "all due": None,
            # stale shifts (one too small everywhere): a slice that needs more says so, every
            # slice re-runs from that op with it -- still the unsplit step's numbers
            "stale": {k: max(v - 1, 0) for k, v in shifts.items()},
        }
        plan = plan.replace(micro_batches=3)  # ragged slices: 21, 21, 22 rows
        names = [*t.state, plan.graph.logits]
        for label, given in cases.items():
            piped, pstats = _one_step(t, plan, images, labels, given, True)
            serial, sstats = _one_step(t, plan, images, labels, given, False)
            assert "3 micro-batches" in pstats.pipeline and "3 micro-batches" in sstats.pipeline, pstats.pipeline
            assert pstats.pipeline_syncs == len(requant) - len(given or {}), label
            assert pstats.shifts == shifts, label
            _same(piped, base, names)
            _same(serial, base, names)
            if label == "stale":
                assert "rewind" in pstats.pipeline and "rewind" in sstats.pipeline
            if backend == "dsp" and label == "all given":
                assert "own thread" in pstats.pipeline and pstats.pipeline_ops == len(plan.pipeline_ops()[0])
    finally:
        t.close()


def test_co_scheduled_training_equals_serial_training(small_run, tmp_path):
    """Steps with the controller's own given shifts and due checks, micro-batches forced:
    every step pipelines and the weights stay those of the unpipelined run."""
    piped = _trainer(small_run, "cpu", tmp_path / "p", micro_batches=2)
    serial = _trainer(small_run, "cpu", tmp_path / "s", co_schedule=False)
    try:
        assert piped.plans.get(64, True).micro_batches == 2
        assert serial.plans.get(64, True).micro_batches == 1
        for x, y in _batches(piped):
            p, s = piped.step(x, y), serial.step(x, y)
            assert "micro-batches" in p.pipeline and s.pipeline is None
            assert p.shifts == s.shifts
            _same(_weights(piped), _weights(serial), piped.state)
    finally:
        piped.close()
        serial.close()


def test_batch_split_is_bit_identical_and_splits(small_run, tmp_path):
    # a tiny L2, calls that cost nothing and memory-bound products (compute as good as free):
    # the cost model splits; with 1 ms calls it never does
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(
        "name: tiny\ndsp: {vtcm: 64KiB, l2: 128KiB}\ncpu: {l2: 32KiB, call_s: 1.0e-9, macs_per_s: 1.0e+18}\n"
    )
    slow = tmp_path / "slow.yaml"
    slow.write_text("name: slow\ndsp: {vtcm: 64KiB, l2: 128KiB}\ncpu: {l2: 32KiB, call_s: 1.0e-3}\n")
    results = {}
    for label, device, split in (("split", tiny, True), ("off", tiny, False), ("declined", slow, True)):
        t = _trainer(small_run, "cpu", tmp_path / label, device=str(device), batch_split=split)
        try:
            stats = [t.step(x, y) for x, y in _batches(t, 3)]
            results[label] = _weights(t)
            done = sum(s.split_ops for s in stats)
            if label == "split":
                assert done >= 1 and sum(s.split_calls for s in stats) > done
                plan = t.plans.get(64, True)
                assert sum(plan.split_rows(op, 64) is not None for op in plan.graph.ops) >= 2
                # the cpu kernels block for the cache: only requantized products (their int32
                # accumulators) are split, never a weight gradient
                assert all(plan.split_rows(op, 64) is None for op in plan.graph.ops if "bwd_weight" in op.name)
            else:
                assert done == 0, label
        finally:
            t.close()
    _same(results["split"], results["off"], results["split"])
    _same(results["declined"], results["off"], results["off"])


def test_split_chunks_take_a_raised_shift_at_once(small_run, tmp_path, monkeypatch):
    """Given shifts of 0 (every chunk's range asks for more): once a chunk has raised the
    shift, the chunks after it run with the raised one, so only chunks before the last raise
    run again (rerun_slices counts them); the step is the unsplit one bit for bit."""
    from dsptrain.execute import split

    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(
        "name: tiny\ndsp: {vtcm: 64KiB, l2: 128KiB}\ncpu: {l2: 32KiB, call_s: 1.0e-9, macs_per_s: 1.0e+18}\n"
    )
    calls = []
    chunked = split.run_rows

    def spy(executor, plan, op, env, ctx, stats, a, b, shift=None):
        outputs, used = chunked(executor, plan, op, env, ctx, stats, a, b, shift)
        calls.append((op.name, a, shift, used))
        return outputs, used

    envs, steps = {}, {}
    for label, on in (("split", True), ("whole", False)):
        t = _trainer(small_run, "cpu", tmp_path / label, device=str(tiny), batch_split=on, co_schedule=False)
        try:
            plan = t.plans.get(64, True)
            shifts = {op.name: 0 for op, _ in t.rescale.adaptive_ops(plan.graph)}
            ((x, y),) = _batches(t, 1)
            monkeypatch.setattr(split, "run_rows", spy)
            envs[label], steps[label] = _one_step(t, plan, x, y, shifts, threaded=False)
            monkeypatch.setattr(split, "run_rows", chunked)
        finally:
            t.close()
    assert steps["split"].shifts == steps["whole"].shifts
    _same(envs["split"], envs["whole"], [k for k in envs["whole"] if k not in ("input", "labels")])
    reruns = 0
    for name in {c[0] for c in calls}:
        mine = [c for c in calls if c[0] == name]
        starts = sorted({c[1] for c in mine})
        first, again = mine[: len(starts)], mine[len(starts) :]
        if first[0][3] is None:  # not requantized (a weight gradient)
            continue
        for i, (_, _, forced, _) in enumerate(first[1:], 1):
            raised = max(c[3] for c in first[:i])
            assert forced == (raised if raised > 0 else None), (name, first)
        last_raise = max(i for i, c in enumerate(first) if i == 0 or c[3] > first[i - 1][3])
        assert all(starts.index(c[1]) < last_raise for c in again), (name, first, again)
        reruns += len(again)
    assert steps["split"].split_ops >= 2 and steps["split"].rerun_slices == reruns


def test_adaptive_rescaling_exact_while_stable_and_follows_a_jump(small_run, tmp_path):
    dyn = _trainer(small_run, "cpu", tmp_path / "d", adaptive_rescale=False)
    ada = _trainer(small_run, "cpu", tmp_path / "a")
    try:
        batches = _batches(dyn, STEPS)
        skipped = 0
        for step, (x, y) in enumerate(batches):
            given = ada.rescale.shifts_for(ada.global_step, ada.plans.get(64, True).graph) or {}
            d, a = dyn.step(x, y), ada.step(x, y)
            # a given shift above the true one is the only way the two may part
            stale_high = [k for k, s in given.items() if s > d.shifts[k]]
            if stale_high:
                break
            assert a.shifts == d.shifts, step
            _same(_weights(ada), _weights(dyn), ada.state)
            skipped += len(given)
        assert skipped > 0, "no step ran on given shifts"
        # a jump: the same images at 4x contrast push activations up; given shifts that are
        # now too small are replaced in that very step, so it matches dynamic rescaling there
        # (at a step where no op is due for a check, so every shift is a given one)
        graph = ada.plans.get(64, True).graph
        ada.global_step = dyn.global_step
        for state in ada.rescale.ops.values():
            state.next_check = max(state.next_check, ada.global_step + 1)
        ada.state = {k: v for k, v in dyn.state.items()}
        x, y = batches[-1]
        jump = np.clip((x.astype(np.int32) - 128) * 4 + 128, 0, 255).astype(np.uint8)
        given = ada.rescale.shifts_for(ada.global_step, graph) or {}
        d, a = dyn.step(jump, y), ada.step(jump, y)
        moved_up = [k for k, s in given.items() if d.shifts[k] > s]
        assert moved_up, "the jump did not move any shift up"
        for k in moved_up:
            assert a.shifts[k] == d.shifts[k]
            assert ada.rescale.ops[k].fallbacks >= 1
    finally:
        dyn.close()
        ada.close()


@pytest.mark.parametrize("backend", ["cpu", "dsp"])
def test_requantize_saturation_rule_bit_exact(backend, request):
    from dsptrain.backends import backend_class
    from dsptrain.backends.ops_ref import RefBackend

    if backend == "dsp":
        request.getfixturevalue("emulated_dsp_tools")
        be = backend_class("dsp")(transport="emulated")
    else:
        be = backend_class(backend)()
    ref, rng = RefBackend(), np.random.default_rng(7)
    try:
        for n in (1, 31, 127, 128, 129, 1000, 4097):  # ragged tails and vector bodies
            for scale in (90, 3000, 2**20, 2**31 - 1):
                acc = rng.integers(-scale, scale, n, dtype=np.int64).astype(np.int32)
                for mode in ("round", "psto", "sto"):
                    for s in (None, 0, 2, 9, 30):
                        key = RngKey(3, 5, 7, 11)
                        want, got = ref.requantize(acc, mode, key, s), be.requantize(acc, mode, key, s)
                        assert got[1] == want[1] and np.array_equal(got[0], want[0]), (n, scale, mode, s)
        x = rng.integers(-127, 128, (5, 9, 7, 3), dtype=np.int8)  # fused conv epilogue
        w = rng.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)
        for s in (None, 0, 4, 40):
            want = ref.conv2d_requant_s8(x, w, 1, 1, "sto", RngKey(1, 2, 3, 4), s)
            got = be.conv2d_requant_s8(x, w, 1, 1, "sto", RngKey(1, 2, 3, 4), s)
            assert got[1] == want[1] and np.array_equal(got[0], want[0]), s
    finally:
        be.close()


def test_profile_placement_changes_no_bit(small_run, tmp_path, emulated_dsp_tools):
    """The same co-scheduled step with max-pool on the CPU (profile) and on the DSP (first):
    the backends agree bit for bit, so placement moves time, never numbers."""
    weights, stats = {}, {}
    for placement in ("profile", "first"):
        t = _trainer(small_run, "dsp", tmp_path / placement, micro_batches=2, placement=placement)
        try:
            ((x, y),) = _batches(t, 1)
            stats[placement] = t.step(x, y)
            weights[placement] = _weights(t)
        finally:
            t.close()
    assert "2 micro-batches" in stats["profile"].pipeline
    assert stats["profile"].ops_on["cpu"] > stats["first"].ops_on["cpu"]
    assert stats["profile"].shifts == stats["first"].shifts
    _same(weights["profile"], weights["first"], weights["first"])
