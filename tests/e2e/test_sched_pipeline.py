"""Mandheling's scheduler end to end: the co-scheduled step equals the serial and the
unsplit step bit for bit (cpu and the emulated DSP); batch splitting changes nothing;
adaptive rescaling is dynamic rescaling while shifts hold and follows a jump at once;
requantize's saturation rule is bit-exact on every backend."""
import dataclasses

import numpy as np
import pytest

from dsptrain import data as datasets
from dsptrain.executor import StepContext, StepStats
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


@pytest.mark.parametrize("backend", ["cpu", "dsp"])
def test_pipelined_step_equals_serial_and_unsplit(small_run, tmp_path, backend, request):
    if backend == "dsp":
        request.getfixturevalue("emulated_dsp_tools")
    t = _trainer(small_run, backend, tmp_path)
    try:
        (images, labels), = _batches(t, 1)
        plan = t.plans.get(64, True)
        assert backend == "cpu" or plan.micro_batches == 2     # a DSP in the plan: co-scheduled
        base, stats = _one_step(t, plan, images, labels, None, True)   # dynamic shifts, unsplit
        assert stats.pipeline is None or stats.pipeline.startswith("serial")
        shifts = dict(stats.shifts)
        assert shifts
        plan.micro_batches = 4 if backend == "cpu" else 2
        names = [*t.state, plan.graph.logits]
        piped, pstats = _one_step(t, plan, images, labels, shifts, True)
        serial, sstats = _one_step(t, plan, images, labels, shifts, False)
        assert "micro-batches" in pstats.pipeline and "micro-batches" in sstats.pipeline, pstats.pipeline
        _same(piped, base, names)
        _same(serial, base, names)
        # stale shifts (one too small everywhere): the slices' own estimates take over, the
        # attempt is dropped and the step re-run whole -- still the unsplit step's numbers
        low = {k: max(v - 1, 0) for k, v in shifts.items()}
        rerun, rstats = _one_step(t, plan, images, labels, low, True)
        assert "saturate" in rstats.pipeline
        _same(rerun, base, names)
    finally:
        t.close()


def test_batch_split_is_bit_identical_and_splits(small_run, tmp_path):
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("name: tiny\ndsp: {vtcm: 64KiB, l2: 128KiB}\ncpu: {l2: 32KiB}\n")
    results = {}
    for split in (True, False):
        t = _trainer(small_run, "cpu", tmp_path / str(split), device=str(tiny), batch_split=split)
        try:
            stats = [t.step(x, y) for x, y in _batches(t, 3)]
            results[split] = _weights(t)
            if split:
                assert stats[-1].split_ops >= 3 and stats[-1].split_calls > stats[-1].split_ops
            else:
                assert stats[-1].split_ops == 0
        finally:
            t.close()
    _same(results[True], results[False], results[True])


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
        ada.state = {k: v for k, v in dyn.state.items()}
        x, y = batches[-1]
        jump = np.clip((x.astype(np.int32) - 128) * 4 + 128, 0, 255).astype(np.uint8)
        graph = ada.plans.get(64, True).graph
        given = ada.rescale.shifts_for(ada.global_step, graph) or {}
        ada.global_step = dyn.global_step
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
        for n in (1, 31, 127, 128, 129, 1000, 4097):                # ragged tails and vector bodies
            for scale in (90, 3000, 2**20, 2**31 - 1):
                acc = rng.integers(-scale, scale, n, dtype=np.int64).astype(np.int32)
                for mode in ("round", "psto", "sto"):
                    for s in (None, 0, 2, 9, 30):
                        key = RngKey(3, 5, 7, 11)
                        want, got = ref.requantize(acc, mode, key, s), be.requantize(acc, mode, key, s)
                        assert got[1] == want[1] and np.array_equal(got[0], want[0]), (n, scale, mode, s)
        x = rng.integers(-127, 128, (5, 9, 7, 3), dtype=np.int8)      # fused conv epilogue
        w = rng.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)
        for s in (None, 0, 4, 40):
            want = ref.conv2d_requant_s8(x, w, 1, 1, "sto", RngKey(1, 2, 3, 4), s)
            got = be.conv2d_requant_s8(x, w, 1, 1, "sto", RngKey(1, 2, 3, 4), s)
            assert got[1] == want[1] and np.array_equal(got[0], want[0]), s
    finally:
        be.close()
