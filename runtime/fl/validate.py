"""Checks on a client's update before the server aggregates it.

A bad update (other tensor names, wrong shapes or dtypes, NaN or infinity, integers
outside the recipe's range, an exponent far from the global model's, a non-positive
example count) is rejected with a reason naming the tensor and the values, logged by
the strategy, and never aggregated: one broken phone must not poison the global model.
"""
from __future__ import annotations

import numpy as np

from ..errors import DataError
from ..numerics import QTensor
from .aggregate import qmax


class UpdateError(DataError):
    """A federated update is malformed; the message names the tensor and the values."""


def check_update(update: dict, num_examples, reference: dict, bits: int = 8,
                 max_exponent_shift: int = 4) -> None:
    """Raise UpdateError unless `update` can be averaged into `reference` (the global model).

    `max_exponent_shift`: how far (in bits) an integer tensor's exponent may move from
    the global model's. NITI keeps weight exponents fixed, so any move is suspect; a
    few bits leave room for recipes that rescale weights.
    """
    if isinstance(num_examples, bool) or not isinstance(num_examples, (int, float)) \
            or not np.isfinite(num_examples) or num_examples <= 0 or int(num_examples) != num_examples:
        raise UpdateError(f"num-examples {num_examples!r} is not a positive whole number")
    missing, extra = sorted(set(reference) - set(update)), sorted(set(update) - set(reference))
    if missing or extra:
        raise UpdateError(f"tensors differ from the global model: missing {missing or 'none'}, "
                          f"unexpected {extra or 'none'}")
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
                raise UpdateError(f"{name}: exponent {got.e} is more than {max_exponent_shift} "
                                  f"from the global model's {want.e}")
        else:
            bad = int(np.size(got_q) - np.count_nonzero(np.isfinite(got_q)))
            if bad:
                raise UpdateError(f"{name}: {bad} of {got_q.size} values are NaN or infinite")
