"""Per-step learning-rate schedules, and how NITI's mu follows them."""

import math
from types import SimpleNamespace

import dsptrain
import pytest
from dsptrain.algorithms import niti
from dsptrain.config import LrSchedule
from dsptrain.train.schedule import lr_factor
from dsptrain.train.validation import Monitor


def test_warmup_then_cosine():
    s = LrSchedule(kind="cosine", warmup_steps=4, min_factor=0.1)
    assert [lr_factor(s, i, 104) for i in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(s, 4, 104) == 1.0
    assert lr_factor(s, 54, 104) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_factor(s, 104, 104) == pytest.approx(0.1)


def test_step_and_exponential_and_none():
    assert [lr_factor(LrSchedule(kind="step", step_size=3, gamma=0.5), i, 10) for i in (0, 2, 3, 6)] == [
        1,
        1,
        0.5,
        0.25,
    ]
    assert lr_factor(LrSchedule(kind="exponential", gamma=0.9), 2, 10) == pytest.approx(0.81)
    assert lr_factor(None, 5, 10) == lr_factor(LrSchedule(), 5, 10) == 1.0


@pytest.mark.parametrize("scale, mu", [(1.0, 4), (0.5, 3), (0.3, 2), (2.0, 5), (1e-6, 1), (1e6, 8)])
def test_niti_mu_moves_by_log2_of_the_factor(scale, mu):
    recipe = dsptrain.load_recipe("niti")
    ctx = SimpleNamespace(recipe=recipe, epoch=0, lr_scale=scale)
    assert niti.scheduled_mu(ctx) == mu == min(8, max(1, niti.DEFAULT_MU + round(math.log2(scale))))


def test_monitor_best_and_patience():
    m = Monitor("val_accuracy", "val_loss", patience=2, min_delta=0.01)
    assert m.epoch({"val_accuracy": 0.5, "val_loss": 1.0}) == (True, False)
    assert m.epoch({"val_accuracy": 0.4, "val_loss": 0.995}) == (False, False)  # not better by min_delta
    assert m.epoch({"val_accuracy": 0.6, "val_loss": 1.2}) == (True, True)
    assert m.stopped
    restored = Monitor("val_accuracy", "val_loss", patience=2)
    restored.restore(m.state())
    assert restored.stopped and restored.best == 0.6
