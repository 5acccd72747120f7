"""Training under a memory budget: the arena holds what the plan says, and micro-batched,
recomputed and re-planned steps end with weights bit-identical to the plain step
(NITI, LeNet-5, real Fashion-MNIST batches, the reference backend)."""

import dataclasses
import json

import dsptrain
import numpy as np
import pytest
from dsptrain.config import MemoryConfig

STEPS, BATCH = 3, 64


def _train(run, memory, tmp_path, steps=STEPS):
    trainer = dsptrain.Trainer(dataclasses.replace(run, memory=memory), backend="ref", out_dir=tmp_path, progress=False)
    data = trainer.train_data
    stats = [
        trainer.step(data.images[i * BATCH : (i + 1) * BATCH], data.labels[i * BATCH : (i + 1) * BATCH])
        for i in range(steps)
    ]
    weights = {k: (v.q.copy(), v.e) for k, v in trainer.state.items()}
    return trainer, stats, weights


def _same(a, b):
    return all(np.array_equal(a[k][0], b[k][0]) and a[k][1] == b[k][1] for k in a)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    import dsptrain.config as config

    run = dsptrain.load_run(config.CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
    run = dataclasses.replace(run, data=dataclasses.replace(run.data, train_limit=BATCH * 8, test_limit=100))
    _, _, weights = _train(run, MemoryConfig(), tmp_path_factory.mktemp("plain"), steps=6)
    return run, weights


def test_planned_peak_is_the_arena_high_water_mark(plain, tmp_path):
    run, _ = plain
    trainer, stats, _ = _train(run, MemoryConfig(arena=True), tmp_path)
    for s in stats:
        assert s.spilled_bytes == 0
        assert s.arena_high_water_bytes == s.arena_bytes == trainer._arena.nbytes
        assert s.planned_peak_bytes >= s.arena_bytes
    assert all(trainer._arena.holds(v.q) for v in trainer.state.values())


@pytest.mark.parametrize("micro_batch, recompute", [(16, "none"), (7, "none"), (64, "sqrt"), (5, "all"), (13, "sqrt")])
def test_micro_batched_and_recomputed_steps_are_bit_identical(plain, tmp_path, micro_batch, recompute):
    run, weights = plain
    _, stats, _ = _train(run, MemoryConfig(arena=True, micro_batch=micro_batch, recompute=recompute), tmp_path)
    _, _, ours = _train(
        run, MemoryConfig(arena=True, micro_batch=micro_batch, recompute=recompute), tmp_path / "six", steps=6
    )
    assert _same(weights, ours)
    assert all(s.spilled_bytes == 0 and s.arena_high_water_bytes == s.arena_bytes for s in stats)
    if micro_batch < BATCH:  # slices with their own smaller range were re-run with the common shift
        assert sum(s.rerun_slices for s in stats) > 0
    if recompute != "none":
        assert all(s.recomputed_ops > 0 for s in stats)


def test_a_budget_that_shrinks_and_grows_mid_run_keeps_training_exact(plain, tmp_path):
    run, weights = plain
    probe = dsptrain.Trainer(run, backend="ref", progress=False, out_dir=tmp_path / "probe")
    fitter = probe.plans.get(BATCH, True).fitter()
    roomy, tight = fitter.options[0].peak, fitter.smallest().peak
    schedule = {0: roomy, 2: tight, 4: (tight + roomy) // 2}
    trainer, stats, ours = _train(run, MemoryConfig(budget=schedule), tmp_path, steps=6)
    assert _same(weights, ours)
    assert [s.budget_bytes for s in stats] == [roomy, roomy, tight, tight] + [schedule[4]] * 2
    assert all(s.planned_peak_bytes <= s.budget_bytes for s in stats)
    assert stats[2].memory_plan != stats[0].memory_plan and stats[2].recomputed_ops > 0
    assert stats[0].arena_bytes > stats[2].arena_bytes
    assert trainer.plans.builds == 1  # one placement; the budget only picks other options


def test_memory_is_recorded_per_batch_in_metrics(plain, tmp_path):
    run, _ = plain
    run = dataclasses.replace(
        run,
        memory=MemoryConfig(budget="4MB"),
        data=dataclasses.replace(run.data, train_limit=BATCH * 2),
        train=dataclasses.replace(run.train, epochs=1),
    )
    trainer = dsptrain.Trainer(run, backend="ref", progress=False, out_dir=tmp_path)
    trainer.fit()
    steps = [
        json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"kind": "step"' in line
    ]
    assert len(steps) == 2
    for record in steps:
        assert record["planned_peak_bytes"] <= record["budget_bytes"] == 4 << 20
        assert record["arena_high_water_bytes"] > 0 and record["rss_bytes"] > 0 and record["peak_rss_bytes"] > 0
        assert record["time_s"] > 0 and "memory_plan" in record


def test_a_budget_too_small_fails_before_training(plain, tmp_path):
    run, _ = plain
    run = dataclasses.replace(run, memory=MemoryConfig(budget="64KB"))
    trainer = dsptrain.Trainer(run, backend="ref", progress=False, out_dir=tmp_path)
    with pytest.raises(dsptrain.UserError, match="smallest feasible budget"):
        trainer.fit()
    assert not (tmp_path / "metrics.jsonl").exists()
