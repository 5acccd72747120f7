"""NITI trains a model with dilated convolutions: integer products on every backend (the
conv2d_dilated_* hooks), the same bits on ref, cpu and the emulated DSP, a finite and
falling loss, and exports ONNX Runtime reads back to dsptrain's logits exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.niti_model_runs import assert_exports_exact, assert_same_weights, train_steps

DILATED = """model:
  name: dilated
  input_shape: [28, 28, 1]
  layers:
    - {kind: conv, out: 8, kernel: 3, dilation: 2, padding: 2}
    - relu
    - {kind: conv, out: 12, kernel: 3, stride: 2, dilation: 3, padding: 2, bias: true}
    - relu
    - {kind: conv, out: 16, kernel: 3, stride: 2, padding: 1, dilation: 2}
    - relu
    - flatten
    - {kind: linear, out: 10}
train: {epochs: 1, batch_size: 16}
"""
DILATED_KINDS = {"niti.dilconv_fwd", "niti.dilconv_bwd_data", "niti.dilconv_bwd_weight", "niti.conv_acc"}


def _train(tmp_path, backend, extra=""):
    return train_steps(tmp_path, backend, DILATED, DILATED_KINDS, "dilated", extra)


@pytest.fixture(scope="module")
def on_cpu(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("dilated-cpu"), "cpu")


def test_niti_trains_a_dilated_model_with_a_falling_loss(on_cpu):
    losses, _, placed, _ = on_cpu
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < 0.8 * np.mean(losses[:3]), losses
    kinds = {name.rsplit(".", 1)[1] for name in placed}
    assert kinds == {"fwd", "bwd_data", "bwd_weight"} and len(placed) == 8, placed  # conv1 has no bwd_data
    assert set(placed.values()) == {"cpu"}, placed


def test_ref_and_cpu_train_to_the_same_bits(tmp_path, on_cpu):
    losses, weights, _, _ = on_cpu
    ref_losses, ref_weights, placed, _ = _train(tmp_path, "ref")
    assert set(placed.values()) == {"ref"}
    assert ref_losses == losses
    assert_same_weights(weights, ref_weights)


def test_the_dsp_runs_the_dilated_products_to_the_cpus_bits(tmp_path, on_cpu, emulated_dsp_tools):
    _, weights, _, _ = on_cpu
    # every product the DSP supports on it (the profile's speeds would put some on the CPU)
    _, dsp_weights, placed, _ = _train(tmp_path, "dsp", "scheduler: {placement: first}\n")
    assert {placed[f"conv1.{p}"] for p in ("fwd", "bwd_weight")} == {"dsp"}, placed
    assert_same_weights(weights, dsp_weights)


def test_exports_give_dsptrains_logits_exactly(tmp_path, on_cpu):
    assert_exports_exact(on_cpu[3], tmp_path, "dilated")
