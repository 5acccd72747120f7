"""Aggregation that one poisoned update cannot drag far: weight caps, norm clipping,
trimmed mean and median (the rule is `fl.aggregation`; FedAvg stays exact, aggregate.py).

Every update has passed validate.py (right names, shapes, dtypes, exponents within the
window, finite values, a bounded example count), yet a valid update can still be hostile:
int8 weights all at +-127 with the exponent raised by the window's four bits, FP32
weights of 3e38, or a claim of many more examples than the others. What each rule does:

- `max_weight` (any rule): no client carries more than this share of the aggregate;
  the larger counts are cut to the level c where sum_k min(n_k, c) * share = c
  (water-filling), so the others keep their proportions.
- `clip`: each client's change from the global model, w_k - w, is scaled down to norm at
  most C (its L2 norm over the whole model) before the weighted mean; C is
  `fl.clip_norm`, or with 0 the median of the round's norms, so an honest round is
  nearly untouched and one outsized update counts as a typical one (norm clipping:
  Sun et al., "Can You Really Backdoor Federated Learning?", 2019).
- `trimmed_mean`: per coordinate, the `fl.trim` share of the highest and of the lowest
  values is dropped and the rest averaged; `median`: the per-coordinate median (Yin et
  al., "Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates",
  ICML 2018). Both ignore example counts, as those are the client's own claim.

Integer tensors are averaged as values (q * 2**e, exactly representable in float64) and
put back on the global model's exponent (NITI keeps a layer's exponent for the run),
coarser only if the mean would not fit the integer range; so a client cannot move the
global exponent, and rounding is the recipe's (halves away from zero).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..numerics import QTensor
from .aggregate import qmax

AGGREGATIONS = ("fedavg", "clip", "trimmed_mean", "median")


def capped_weights(counts: Sequence[int], share: float) -> list[int]:
    """Example counts with none above `share` of their sum (integers, each at least 1);
    share >= 1 leaves them as they are; a share no set can meet gives equal weights."""
    counts = [int(n) for n in counts]
    if share >= 1.0 or len(counts) < 2:
        return counts
    ordered = sorted(counts, reverse=True)
    for capped in range(len(ordered)):
        if share * capped >= 1.0:
            break
        level = share * sum(ordered[capped:]) / (1.0 - share * capped)
        if ordered[capped] <= level and (capped == 0 or ordered[capped - 1] >= level):
            return [max(1, int(min(n, level))) for n in counts]
    return [1] * len(counts)


def _values(tensor) -> np.ndarray:
    if isinstance(tensor, QTensor):
        return tensor.q.astype(np.float64) * np.ldexp(1.0, int(tensor.e))
    return np.asarray(tensor, np.float64)


def _like(reference, values: np.ndarray, bits: int):
    """`values` in the form of the global model's tensor `reference`."""
    if not isinstance(reference, QTensor):
        return values.astype(np.asarray(reference).dtype)
    limit, exponent = qmax(bits), int(reference.e)
    top = float(np.max(np.abs(values), initial=0.0))
    while top > limit * np.ldexp(1.0, exponent):
        exponent += 1
    scaled = values / np.ldexp(1.0, exponent)
    q = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)  # halves away from zero
    return QTensor(np.clip(q, -limit, limit).astype(reference.q.dtype), exponent)


def robust_state(
    updates: Sequence[tuple[object, dict, int]],
    global_state: dict,
    rule: str,
    *,
    bits: int = 8,
    clip_norm: float = 0.0,
    trim: float = 0.2,
) -> tuple[dict, list[str]]:
    """(the new global model, notes naming each client the rule cut back) from
    `updates` = [(client id, state, weight)] under `rule` (clip, trimmed_mean, median)."""
    if rule not in AGGREGATIONS[1:]:
        raise ValueError(f"robust rule {rule!r} is not one of {', '.join(AGGREGATIONS[1:])}")
    names = list(global_state)
    base = {name: _values(global_state[name]) for name in names}
    deltas = [{name: _values(state[name]) - base[name] for name in names} for _, state, _ in updates]
    notes = []
    if rule == "clip":
        norms = [float(np.sqrt(sum(float(np.sum(d * d)) for d in delta.values()))) for delta in deltas]
        bound = clip_norm if clip_norm > 0 else float(np.median(norms))
        scales = []
        for (client, _, _), norm in zip(updates, norms):
            scale = 1.0 if norm <= bound or norm == 0.0 else bound / norm
            if scale < 1.0:
                notes.append(f"client {client}: update norm {norm:.4g} clipped to {bound:.4g}")
            scales.append(scale)
        weights = np.array([w for _, _, w in updates], np.float64)
        weights /= weights.sum()
        change = {name: sum(wk * sk * d[name] for wk, sk, d in zip(weights, scales, deltas)) for name in names}
    else:
        stack = {name: np.stack([d[name] for d in deltas]) for name in names}
        if rule == "median":
            change = {name: np.median(values, axis=0) for name, values in stack.items()}
            _note_extremes(updates, stack, 1, "median", notes)
        else:
            cut = int(trim * len(updates))
            if cut == 0:
                notes.append(f"trimmed mean of {len(updates)} updates trims none (fl.trim {trim:g})")
            change = {
                name: np.sort(values, axis=0)[cut : len(updates) - cut].mean(axis=0) for name, values in stack.items()
            }
            if cut:
                _note_extremes(updates, stack, cut, "trimmed mean", notes)
    return {name: _like(global_state[name], base[name] + change[name], bits) for name in names}, notes


def _note_extremes(updates, stack, cut, rule, notes) -> None:
    """Name each client whose values in a tensor sit among the `cut` highest or lowest far
    more often than chance (2 * cut / K of them): halfway from that to always. An
    attacker's update is at an extreme almost everywhere it differs."""
    k = len(updates)
    threshold = (1.0 + 2 * cut / k) / 2
    for name, values in stack.items():
        order = np.argsort(values, axis=0, kind="stable").reshape(k, -1)
        counts = np.zeros(k, np.int64)
        for rank in (*range(cut), *range(k - cut, k)):
            counts += np.bincount(order[rank], minlength=k)
        size = order.shape[1]
        for (client, _, _), count in zip(updates, counts):
            if size and count > threshold * size:
                notes.append(
                    f"client {client}: {name}: {count / size:.0%} of its values at the extremes, left out by the {rule}"
                )
