"""Checks on a client's reply before the server aggregates it: the update and its metrics.

A bad update (other tensor names, wrong shapes or dtypes, NaN or infinity, integers
outside the recipe's range, an exponent far from the global model's, a non-positive
example count) is rejected with a reason naming the tensor and the values, logged by
the strategy, and never aggregated: one broken phone must not poison the global model. Its metrics too are checked whole
(check_metrics: exactly the keys a dsptrain client sends, each a finite number in its
range), so neither the server's round log nor Flower's own aggregation, which needs
every reply to carry the same keys, meets a surprise.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import DataError
from ..numerics import QTensor
from .aggregate import qmax


class UpdateError(DataError):
    """A federated update is malformed; the message names the tensor and the values."""


TRAIN_METRICS = (
    "num-examples",
    "train_loss",
    "train_accuracy",
    "steps",
    "time_s",
    "time_s_per_batch",
    "energy_j",
    "energy_j_per_batch",
    "upload_bytes",
)
EVALUATE_METRICS = ("num-examples", "eval_accuracy")
_MAY_BE_NAN = ("energy_j", "energy_j_per_batch")  # a device no meter reads reports NaN: unknown
_WHOLE = ("num-examples", "steps", "upload_bytes")
_SHARES = ("train_accuracy", "eval_accuracy")
MAX_EXAMPLES = 1 << 40  # whatever the run: past this, integer sums need care


def check_metrics(metrics, expected: tuple[str, ...], max_examples: int = MAX_EXAMPLES) -> int:
    """The reply's example count, after checking that `metrics` (a MetricRecord or dict)
    holds exactly the keys `expected`, each a finite non-negative number (energy may be
    NaN), counts whole, accuracies in [0, 1], examples in 1..max_examples."""
    keys = set(metrics.keys())
    missing, extra = sorted(set(expected) - keys), sorted(keys - set(expected))
    if missing or extra:
        raise UpdateError(
            f"metrics differ from a dsptrain client's: missing {missing or 'none'}, unexpected {extra or 'none'}"
        )
    for key in expected:
        value = metrics[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UpdateError(f"metric {key}: {_short(value)} is not a number")
        if value != value and key in _MAY_BE_NAN:
            continue
        if (isinstance(value, float) and not math.isfinite(value)) or value < 0:
            raise UpdateError(f"metric {key}: {value!r} is not a finite non-negative number")
        if key in _WHOLE and int(value) != value:
            raise UpdateError(f"metric {key}: {value!r} is not a whole number")
        if key in _SHARES and value > 1:
            raise UpdateError(f"metric {key}: {value!r} is above 1")
    examples = metrics["num-examples"]
    if not 1 <= examples <= max_examples:
        raise UpdateError(f"num-examples {examples!r} is outside 1..{max_examples} (fl.max_examples)")
    return int(examples)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_update(
    update: dict,
    num_examples,
    reference: dict,
    bits: int = 8,
    max_exponent_shift: int = 4,
    max_examples: int = MAX_EXAMPLES,
) -> None:
    """Raise UpdateError unless `update` can be averaged into `reference` (the global model).

    `max_exponent_shift`: how far (in bits) an integer tensor's exponent may move from
    the global model's. NITI keeps weight exponents fixed, so any move is suspect; a
    few bits leave room for recipes that rescale weights.
    """
    if (
        isinstance(num_examples, bool)
        or not isinstance(num_examples, (int, float))
        or not np.isfinite(num_examples)
        or num_examples <= 0
        or int(num_examples) != num_examples
    ):
        raise UpdateError(f"num-examples {num_examples!r} is not a positive whole number")
    if num_examples > max_examples:
        raise UpdateError(f"num-examples {num_examples!r} is outside 1..{max_examples} (fl.max_examples)")
    missing, extra = sorted(set(reference) - set(update)), sorted(set(update) - set(reference))
    if missing or extra:
        raise UpdateError(
            f"tensors differ from the global model: missing {missing or 'none'}, unexpected {extra or 'none'}"
        )
    for name, want in reference.items():
        got = update[name]
        if isinstance(want, QTensor) != isinstance(got, QTensor):
            kind = "an integer tensor with an exponent" if isinstance(want, QTensor) else "a float tensor"
            raise UpdateError(f"{name}: expected {kind}, got {'one' if isinstance(got, QTensor) else 'no'} exponent")
        got_q, want_q = (got.q, want.q) if isinstance(want, QTensor) else (got, want)
        if got_q.shape != want_q.shape:
            raise UpdateError(f"{name}: shape {tuple(got_q.shape)} is not the global model's {tuple(want_q.shape)}")
        if got_q.dtype != want_q.dtype:
            raise UpdateError(f"{name}: dtype {got_q.dtype} is not the global model's {want_q.dtype}")
        if isinstance(want, QTensor):
            limit = qmax(bits)
            worst = int(np.max(np.abs(got_q.astype(np.int64)), initial=0))
            if worst > limit:
                raise UpdateError(f"{name}: value of magnitude {worst} is outside +-{limit} ({bits}-bit)")
            if abs(got.e - want.e) > max_exponent_shift:
                raise UpdateError(
                    f"{name}: exponent {got.e} is more than {max_exponent_shift} from the global model's {want.e}"
                )
        else:
            bad = int(np.size(got_q) - np.count_nonzero(np.isfinite(got_q)))
            if bad:
                raise UpdateError(f"{name}: {bad} of {got_q.size} values are NaN or infinite")
