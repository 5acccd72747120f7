"""Per-batch memory and energy that follow the batch, and the epoch's totals."""

import dataclasses
import json
import subprocess
import sys

import dsptrain
import pytest
from dsptrain.config import MemoryConfig
from dsptrain.execute import StepStats
from dsptrain.metrics import EpochTotals, epoch_energy

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def _trainer(run_file, tmp_path, **memory):
    run = dsptrain.load_run(run_file())
    if memory:
        run = dataclasses.replace(run, memory=MemoryConfig(**memory))
    return dsptrain.Trainer(run, out_dir=tmp_path / "out", progress=False)


@linux
def test_rss_growth_of_a_step_follows_its_batch_not_the_largest_before(run_file, tmp_path):
    # In a fresh process: the heap earlier tests left behind (freed chunks the allocator
    # keeps) would let a large step grow nothing and hide what this measures.
    # A budget (large enough to change no plan) is what makes freed memory go back to the
    # system between steps (train.py); without one a steady step reuses what it held.
    script = tmp_path / "rss.py"
    script.write_text(f"""
import dataclasses, json, dsptrain
from dsptrain.config import MemoryConfig
run = dsptrain.load_run({str(run_file())!r})
run = dataclasses.replace(run, memory=MemoryConfig(budget="4GB", arena=False))
trainer = dsptrain.Trainer(run, out_dir={str(tmp_path / "out")!r}, progress=False)
images, labels = trainer.train_data[:160]
growth = []
for batch in (8, 160, 8, 160, 8):   # the large batch first: a small one after it must not inherit its peak
    stats = trainer.step(images[:batch], labels[:batch])
    assert stats.step_peak_rss_bytes <= stats.peak_rss_bytes
    growth.append((batch, stats.rss_growth_bytes))
trainer.close()
print(json.dumps(growth))
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    growth = {}
    for batch, grew in json.loads(done.stdout.splitlines()[-1]):
        growth.setdefault(batch, []).append(grew)
    small, large = max(growth[8][1:]), min(growth[160])
    # LeNet-5 on ref: the 160-row step's activations and temporaries are MBs; 8 rows' a few hundred KB
    assert large > 4 * small and large > 2 << 20, growth


def test_arena_high_water_follows_the_batch(run_file, tmp_path):
    trainer = _trainer(run_file, tmp_path, budget="64MB")
    images, labels = trainer.train_data[:160]
    small = trainer.step(images[:8], labels[:8]).arena_high_water_bytes
    large = trainer.step(images, labels).arena_high_water_bytes
    assert 0 < small < large / 4
    totals = EpochTotals()
    for batch in (8, 160, 8):
        totals.add(trainer.step(images[:batch], labels[:batch]))
    assert totals.record(176, 1.0)["peak_arena_high_water_bytes"] == large


def test_energy_counts_the_work_of_the_batch(run_file, tmp_path):
    trainer = _trainer(run_file, tmp_path)
    images, labels = trainer.train_data[:64]
    full = trainer.step(images, labels)
    partial = trainer.step(images[:40], labels[:40])  # a last batch of 40
    assert full.energy_meter == partial.energy_meter == "estimate:sd865"
    assert 0 < partial.energy_j < full.energy_j
    # the work scales with the rows: 40/64 of the MACs exactly, energy within the bytes' share
    assert partial.int8_macs["ref"] * 64 == full.int8_macs["ref"] * 40
    assert partial.energy_j / full.energy_j == pytest.approx(40 / 64, rel=0.1)


def test_micro_batches_and_recomputation_cost_energy(run_file, tmp_path):
    plain = _trainer(run_file, tmp_path)
    sliced = _trainer(run_file, tmp_path, budget="64MB", micro_batch=16, recompute="none")
    recomputed = _trainer(run_file, tmp_path, budget="64MB", micro_batch=16, recompute="all")
    images, labels = plain.train_data[:64]
    e_plain = plain.step(images, labels)
    e_sliced = sliced.step(images, labels)
    e_recomputed = recomputed.step(images, labels)
    assert e_recomputed.recomputed_ops > 0 and e_sliced.recomputed_ops == 0
    # slices stream the weights once each; recomputation re-runs forward products
    assert e_plain.energy_j < e_sliced.energy_j < e_recomputed.energy_j
    assert e_sliced.bytes_moved > e_plain.bytes_moved


def test_epoch_record_totals_energy_peak_memory_and_samples_per_second(run_file, tmp_path):
    trainer = _trainer(run_file, tmp_path)
    trainer.fit()
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "step"]
    epoch = next(r for r in records if r["kind"] == "epoch")
    assert [r["batch"] for r in steps] == [64, 64, 32]
    assert epoch["energy_j"] == pytest.approx(sum(r["energy_j"] for r in steps))
    assert epoch["energy_meter"] == "estimate:sd865" and epoch["energy_steps"] == 3
    assert epoch["peak_rss_bytes"] == max(r["peak_rss_bytes"] for r in steps)
    assert epoch["peak_rss_growth_bytes"] == max(r["rss_growth_bytes"] for r in steps)
    assert epoch["peak_arena_high_water_bytes"] is None  # no budget, no arena
    assert epoch["samples_per_s"] == pytest.approx(160 / epoch["seconds"])
    for r in steps:
        assert r["rss_growth_bytes"] is not None and r["energy_j"] > 0


def test_smoothed_samples_per_second_does_not_jump_with_one_slow_batch():
    totals = EpochTotals()
    for _ in range(20):
        totals.add(StepStats(0, 0, 64, time_s=0.01))
    assert totals.smoothed_rate == pytest.approx(6400)
    totals.add(StepStats(0, 0, 64, time_s=0.1))  # one batch 10x slower: its own rate is 640
    after_slow = totals.smoothed_rate
    assert 4 * 640 < after_slow < 6400
    totals.add(StepStats(0, 0, 16, time_s=0.0025))  # a partial last batch at the usual speed
    assert after_slow < totals.smoothed_rate < 6400


def test_epoch_energy_is_resummed_when_a_trace_rewrites_the_steps():
    records = [
        {"kind": "step", "epoch": 1, "energy_j": 0.5},
        {"kind": "step", "epoch": 1, "energy_j": float("nan")},
        {"kind": "step", "epoch": 1, "energy_j": 0.25},
        {"kind": "epoch", "epoch": 1, "energy_j": 9.0},
        {"kind": "step", "epoch": 2, "energy_j": None},
        {"kind": "epoch", "epoch": 2, "energy_j": 1.0},
    ]
    out = epoch_energy(records)
    assert (out[3]["energy_j"], out[3]["energy_steps"]) == (0.75, 2)
    assert (out[5]["energy_j"], out[5]["energy_steps"]) == (None, 0)


def test_placement_changes_the_energy_of_the_same_work(run_file, tmp_path, emulated_dsp_tools):
    """The same batch on the emulated DSP and on the CPU: the same MACs, charged at the
    DSP's and the CPU's coefficients (energy/coeffs.py), so the estimate follows placement."""
    run = dsptrain.load_run(run_file())
    figures = {}
    for backend in ("cpu", "dsp"):
        trainer = dsptrain.Trainer(run, backend=backend, out_dir=tmp_path / backend, progress=False)
        try:
            images, labels = trainer.train_data[:8]
            figures[backend] = trainer.step(images, labels)
        finally:
            trainer.close()
    cpu, dsp = figures["cpu"], figures["dsp"]
    assert sum(cpu.int8_macs.values()) == sum(dsp.int8_macs.values())
    assert dsp.int8_macs.get("dsp", 0) > 0 and "dsp" not in cpu.int8_macs
    assert dsp.energy_j < cpu.energy_j and dsp.energy_meter == cpu.energy_meter == "estimate:sd865"
