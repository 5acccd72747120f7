"""Every backend trains to the same bits, and a DSP that dies or hangs mid-step costs nothing.

Runs LeNet-5 + NITI for 20 steps on ref, cpu and the emulated DSP and compares the
weights bit for bit; then kills (SIGKILL) or freezes (SIGSTOP) the DSP server in the
middle of a step and checks that the step finished on the CPU, training went on, and
the weights still match the CPU-only run.
"""

import os
import signal
import warnings

import dsptrain
import numpy as np
import pytest
from dsptrain import data as datasets

STEPS = 20


def train(run, backend, tmp_path, sabotage=None):
    trainer = dsptrain.Trainer(run, backend=backend, out_dir=tmp_path / backend, progress=False)
    placed = []
    try:
        for step, (images, labels) in enumerate(datasets.batches(trainer.train_data, 32, seed=1)):
            if step == STEPS:
                break
            if sabotage is not None and step == STEPS // 2:
                sabotage(trainer)
            stats = trainer.step(images, labels)
            placed.append(stats)
    finally:
        trainer.close()
    return trainer.state, placed


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name].q, b[name].q, err_msg=name)
        assert a[name].e == b[name].e, name


def test_ref_cpu_and_dsp_end_with_identical_weights(small_run, tmp_path, emulated_dsp_tools):
    run = small_run("niti", train_limit=STEPS * 32)
    reference, _ = train(run, "ref", tmp_path)
    cpu, cpu_stats = train(run, "cpu", tmp_path)
    dsp, dsp_stats = train(run, "dsp", tmp_path)
    assert all(s.ops_on.get("cpu", 0) > 0 and "ref" not in s.ops_on for s in cpu_stats)
    assert all(s.ops_on.get("dsp", 0) >= 10 for s in dsp_stats), dsp_stats[0].ops_on
    assert all(not s.fallbacks for s in dsp_stats)
    # the DSP's modeled time per batch (cost.dsp_model_time), on DSP runs only
    assert all(s.dsp_model_s is not None and 0 < s.dsp_model_s < 1 for s in dsp_stats)
    assert all(s.dsp_model_s is None for s in cpu_stats)
    assert_same_weights(reference, cpu)
    assert_same_weights(cpu, dsp)


def _during_next_dsp_batch(trainer, sig):
    """Send `sig` to the DSP server right after it was handed its next op batch, so it
    dies (or freezes) with the batch in flight, in the middle of a training step."""
    transport = trainer.backends["dsp"].transport
    original = transport._write

    def write_then_signal(data):
        transport._write = original
        original(data)
        os.kill(transport._proc.pid, sig)

    transport._write = write_then_signal


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_dsp_failure_mid_step_keeps_training_exact(small_run, tmp_path, monkeypatch, fault, emulated_dsp_tools):
    monkeypatch.setenv("DSPTRAIN_DSP_TIMEOUT", "3")
    run = small_run("niti", train_limit=STEPS * 32)
    expected, _ = train(run, "cpu", tmp_path)
    signal_to_send = signal.SIGKILL if fault == "killed" else signal.SIGSTOP
    sabotage = lambda trainer: _during_next_dsp_batch(trainer, signal_to_send)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, stats = train(run, "dsp", tmp_path, sabotage=sabotage)
    broken = stats[STEPS // 2]
    assert broken.fallbacks and broken.fallbacks[0].startswith("conv1.fwd: dsp -> cpu"), broken.fallbacks
    assert broken.ops_on.get("cpu", 0) > 0
    assert any("failed on dsp" in str(w.message) for w in caught)
    after = stats[STEPS // 2 + 1 :]
    assert after and all(not s.fallbacks and s.ops_on.get("dsp", 0) >= 10 for s in after), "server not restarted"
    assert_same_weights(expected, got)
