"""A client's update is checked before aggregation (dsptrain.fl.validate)."""

import numpy as np
import pytest
from dsptrain.fl.validate import UpdateError, check_update
from dsptrain.numerics import QTensor

GLOBAL = {"conv1.w": QTensor(np.zeros((6, 5, 5, 1), np.int8), -9), "fc.w": QTensor(np.zeros((10, 4), np.int8), -8)}
FLOAT_GLOBAL = {"fc.w": np.zeros((10, 4), np.float32)}


def good():
    return {k: QTensor(np.ones_like(v.q), v.e) for k, v in GLOBAL.items()}


def test_a_good_update_passes():
    check_update(good(), 600, GLOBAL)
    check_update({"fc.w": np.ones((10, 4), np.float32)}, 5, FLOAT_GLOBAL)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda u: u.update({"fc.w": QTensor(np.zeros((10, 5), np.int8), -8)}),
            r"fc.w: shape \(10, 5\) is not the global model's \(10, 4\)",
        ),
        (
            lambda u: u.update({"fc.w": QTensor(np.zeros((10, 4), np.int16), -8)}),
            "fc.w: dtype int16 is not the global model's int8",
        ),
        (
            lambda u: u.update({"conv1.w": QTensor(u["conv1.w"].q, 3)}),
            "conv1.w: exponent 3 is more than 4 from the global model's -9",
        ),
        (
            lambda u: u.update({"fc.w": QTensor(np.full((10, 4), -128, np.int8), -8)}),
            r"fc.w: value of magnitude 128 is outside \+-127",
        ),
        (lambda u: u.pop("conv1.w"), r"missing \['conv1.w'\]"),
        (lambda u: u.update({"extra.w": QTensor(np.zeros(3, np.int8), 0)}), r"unexpected \['extra.w'\]"),
        (
            lambda u: u.update({"fc.w": np.zeros((10, 4), np.float32)}),
            "fc.w: expected an integer tensor with an exponent, got no exponent",
        ),
    ],
)
def test_bad_integer_updates_are_rejected_by_name(change, message):
    update = good()
    change(update)
    with pytest.raises(UpdateError, match=message):
        check_update(update, 600, GLOBAL)


def test_nan_and_infinity_are_rejected():
    update = {"fc.w": np.ones((10, 4), np.float32)}
    update["fc.w"][3, 1] = np.nan
    update["fc.w"][0, 0] = np.inf
    with pytest.raises(UpdateError, match="fc.w: 2 of 40 values are NaN or infinite"):
        check_update(update, 5, FLOAT_GLOBAL)


@pytest.mark.parametrize("count", [0, -3, 2.5, float("nan"), True, "12"])
def test_example_counts_must_be_positive_whole_numbers(count):
    with pytest.raises(UpdateError, match="num-examples"):
        check_update(good(), count, GLOBAL)


def test_the_exponent_window_is_configurable():
    update = good()
    update["fc.w"] = QTensor(update["fc.w"].q, -10)
    check_update(update, 1, GLOBAL, max_exponent_shift=2)
    with pytest.raises(UpdateError, match="more than 1 from"):
        check_update(update, 1, GLOBAL, max_exponent_shift=1)
