"""The bound serial runner (execute/bound.py) against the general one (split.run_op per op):
the same outputs bit for bit and the same counted work (ops per backend, int8 MACs, bytes,
shifts) in StepStats, with shifts given or estimated, and when an op's backend fails
mid-step and the rest of the step falls back to `ref`."""

import dataclasses

import numpy as np
import pytest
from dsptrain import data as datasets
from dsptrain.errors import BackendError
from dsptrain.execute import StepContext, StepStats


def _trainer(small_run, tmp_path):
    from dsptrain.train import Trainer

    run = small_run(epochs=1, train_limit=128)
    run = dataclasses.replace(run, scheduler=dataclasses.replace(run.scheduler, micro_batches=1))
    return Trainer(run, backend="cpu", out_dir=tmp_path, progress=False)


def _step(t, plan, batch, shifts, ops):
    """One step of `plan` from the trainer's weights: (env, stats). `ops` None runs the
    graph's own list (bound); a copy of it goes op by op through split.run_op."""
    images, labels = batch
    ctx = StepContext(t.recipe, plan.graph, t.seed, 3, 0, len(labels), shifts=shifts)
    stats = StepStats(3, 0, len(labels))
    env = dict(t.state)
    env["input"] = t.algorithm.prepare_input(images)
    env["labels"] = np.asarray(labels, np.int64)
    t.executor.run(plan, env, ctx, ops=ops, stats=stats)
    return env, stats


def _counted(stats):
    return (
        dict(stats.ops_on),
        dict(stats.int8_macs),
        stats.fp32_flops,
        stats.bytes_moved,
        dict(stats.shifts),
        sorted(stats.backend_time_s),
    )


def _same_env(a, b):
    assert a.keys() == b.keys()
    for name in a:
        x, y = a[name], b[name]
        if hasattr(x, "q"):
            assert x.e == y.e and np.array_equal(x.q, y.q), name
        else:
            assert np.array_equal(np.asarray(x), np.asarray(y)), name


@pytest.mark.parametrize("given", [False, True])
def test_bound_walk_counts_as_the_general_path(small_run, tmp_path, given):
    t = _trainer(small_run, tmp_path)
    try:
        batch = next(iter(datasets.batches(t.train_data, 64, 0, 0)))
        plan = t.plans.get(64, True)
        env, stats = _step(t, plan, batch, None, None)
        shifts = dict(stats.shifts) if given else None
        if given:
            env, stats = _step(t, plan, batch, shifts, None)
        general_env, general = _step(t, plan, batch, shifts, list(plan.graph.ops))
        assert stats.ops_on == {"cpu": len(plan.graph.ops)}
        assert len(stats.shifts) >= 5  # every requantized product recorded its shift
        assert _counted(stats) == _counted(general)
        _same_env(env, general_env)
    finally:
        t.close()


def test_bound_walk_falls_back_and_counts_there(small_run, tmp_path, monkeypatch):
    """conv2's backward data fails on cpu: it and every later op of the step run on ref
    (a failed backend is not tried again in that step), counted there, same bits."""
    t = _trainer(small_run, tmp_path)
    try:
        batch = next(iter(datasets.batches(t.train_data, 64, 0, 0)))
        plan = t.plans.get(64, True)
        want_env, want = _step(t, plan, batch, None, None)
        cpu = t.executor.backends["cpu"]
        real = type(cpu).conv2d_bwd_data_requant_s8

        def failing(self, *args, **kwargs):
            raise BackendError("cpu", "injected failure")

        monkeypatch.setattr(type(cpu), "conv2d_bwd_data_requant_s8", failing)
        with pytest.warns(RuntimeWarning, match="conv2.bwd_data failed on cpu"):
            env, stats = _step(t, plan, batch, None, None)
        monkeypatch.setattr(type(cpu), "conv2d_bwd_data_requant_s8", real)
        names = [op.name for op in plan.graph.ops]
        on_ref = len(names) - names.index("conv2.bwd_data")
        assert stats.ops_on == {"cpu": len(names) - on_ref, "ref": on_ref}
        assert sum(stats.int8_macs.values()) == sum(want.int8_macs.values())
        assert stats.bytes_moved == want.bytes_moved and stats.shifts == want.shifts
        assert len(stats.fallbacks) == 1 and set(stats.backend_time_s) == {"cpu", "ref"}
        _same_env(env, want_env)
    finally:
        t.close()
