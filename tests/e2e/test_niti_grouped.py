"""NITI trains a model with grouped convolutions (ResNeXt / ShuffleNetV1-style grouped 1x1 and
3x3, a biased one, a dilated depthwise one and a dilated grouped one): integer products on
every backend (the conv2d_grouped_* hooks), the same bits on ref, cpu and the emulated DSP, a
finite and falling loss, and exports ONNX Runtime reads back to dsptrain's logits exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.niti_model_runs import assert_exports_exact, assert_same_weights, train_steps
from tests.interchange.helpers import write_run

GROUPED = """model:
  name: grouped
  input_shape: [28, 28, 1]
  layers:
    - {kind: conv, out: 8, kernel: 3, padding: 1}
    - relu
    - {kind: conv, out: 12, kernel: 1, groups: 4}
    - relu
    - {kind: conv, out: 12, kernel: 3, stride: 2, padding: 1, groups: 3, bias: true}
    - relu
    - {kind: conv, out: 12, kernel: 3, padding: 2, dilation: 2, groups: 12}
    - relu
    - {kind: conv, out: 16, kernel: 3, stride: 2, padding: 2, dilation: 2, groups: 2}
    - relu
    - flatten
    - {kind: linear, out: 10}
train: {epochs: 1, batch_size: 16}
"""
GROUPED_KINDS = {"niti.grpconv_fwd", "niti.grpconv_bwd_data", "niti.grpconv_bwd_weight", "niti.conv_acc"}


def _train(tmp_path, backend, extra=""):
    return train_steps(tmp_path, backend, GROUPED, GROUPED_KINDS, "grouped", extra)


@pytest.fixture(scope="module")
def on_cpu(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("grouped-cpu"), "cpu")


def test_niti_trains_a_grouped_model_with_a_falling_loss(on_cpu):
    losses, _, placed, _ = on_cpu
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < 0.9 * np.mean(losses[:3]), losses  # 2.28 -> 1.96 when written
    assert sorted(placed) == [f"conv{i}.{p}" for i in range(2, 6) for p in ("bwd_data", "bwd_weight", "fwd")]
    assert set(placed.values()) == {"cpu"}, placed


def test_ref_and_cpu_train_to_the_same_bits(tmp_path, on_cpu):
    losses, weights, _, _ = on_cpu
    ref_losses, ref_weights, placed, _ = _train(tmp_path, "ref")
    assert set(placed.values()) == {"ref"}
    assert ref_losses == losses
    assert_same_weights(weights, ref_weights)


def test_the_dsp_runs_the_grouped_products_to_the_cpus_bits(tmp_path, on_cpu, emulated_dsp_tools):
    _, weights, _, _ = on_cpu
    # every product the DSP supports on it (the profile's speeds would put some on the CPU)
    _, dsp_weights, placed, _ = _train(tmp_path, "dsp", "scheduler: {placement: first}\n")
    assert {placed[f"conv{i}.{p}"] for i in (2, 4, 5) for p in ("fwd", "bwd_data", "bwd_weight")} == {"dsp"}, placed
    assert_same_weights(weights, dsp_weights)


def test_exports_give_dsptrains_logits_exactly(tmp_path, on_cpu):
    assert_exports_exact(on_cpu[3], tmp_path, "grouped")


def test_plan_and_recipes_show_where_the_grouped_products_run(tmp_path, capsys):
    from dsptrain.cli import main

    path = write_run(tmp_path, "niti", GROUPED, name="grouped")
    assert main(["plan", str(path), "--backend", "cpu", "--batch-size", "16"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "grouped convs" in line)
    assert "(grouped 2, depthwise dilated 1, grouped dilated 1)" in line, line
    assert "niti.conv_acc 1, niti.grpconv_bwd_data 4, niti.grpconv_bwd_weight 4, niti.grpconv_fwd 3; on cpu 12" in line
    assert main(["recipes", "-v"]) == 0
    niti = [line for line in capsys.readouterr().out.splitlines() if "grouped convs" in line and "niti." in line]
    assert len(niti) == 1 and "niti.grpconv_fwd on dsp" in niti[0] and "niti.grpconv_bwd_weight on dsp" in niti[0], niti
