"""A seeded generator of hostile federated replies, by class of fault.

A reply is built from plain parts (arrays, metrics, how many records of each kind) so
that each case breaks one thing: a metric missing, extra, a list, a string-like value,
NaN, 10**12 or 2**63-1 examples; a record missing, doubled or foreign; a tensor missing,
extra, of another shape or dtype, its exponent absent, fractional, far or orphaned;
corrupt bytes; NaN in float weights. Those must be rejected by name. The `poison` class
passes every check and is hostile anyway (int8 weights at +-127 with the exponent raised
by the window's four bits, FP32 weights of 3e38, a sign flip scaled up): the robust rules
must cut it back and name the client.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
from dsptrain.fl.records import EXPONENT_SUFFIX
from dsptrain.numerics import QTensor
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, Metadata, MetricRecord, RecordDict

HONEST_METRICS = {
    "num-examples": 500,
    "train_loss": 0.9,
    "train_accuracy": 0.7,
    "steps": 10,
    "time_s": 1.5,
    "time_s_per_batch": 0.15,
    "energy_j": float("nan"),
    "energy_j_per_batch": float("nan"),
    "upload_bytes": 62000,
}


def global_state(integer: bool, seed: int = 0) -> dict:
    """A small model's global state: conv and linear weights (int8 with exponents, or
    float32) and batch-norm state (float32 either way)."""
    gen = np.random.default_rng(seed)
    shapes = {"conv1.w": (6, 3, 3, 1), "fc1.w": (10, 54)}
    state = {}
    for name, shape in shapes.items():
        if integer:
            state[name] = QTensor(gen.integers(-60, 61, shape).astype(np.int8), -7)
        else:
            state[name] = gen.normal(0, 0.2, shape).astype(np.float32)
    state["bn1.gamma"] = np.ones(6, np.float32)
    state["bn1.mean"] = gen.normal(0, 0.1, 6).astype(np.float32)
    return state


def honest_update(state: dict, gen: np.random.Generator) -> dict:
    """The global model moved a little, as a local training step would."""
    out = {}
    for name, value in state.items():
        if isinstance(value, QTensor):
            q = np.clip(value.q.astype(np.int16) + gen.integers(-3, 4, value.q.shape), -127, 127).astype(np.int8)
            out[name] = QTensor(q, value.e)
        else:
            out[name] = (value + gen.normal(0, 0.02, value.shape)).astype(value.dtype)
    return out


@dataclass
class Reply:
    """The parts of one reply; `build` makes the Message."""

    arrays: dict  # key -> ndarray or Array (exponents as "<name>.exp")
    metrics: dict = field(default_factory=lambda: dict(HONEST_METRICS))
    array_records: int = 1
    metric_records: int = 1
    config_record: bool = False
    error: str | None = None

    @classmethod
    def of(cls, state: dict, examples: int = 500) -> Reply:
        arrays = {}
        for name, value in state.items():
            if isinstance(value, QTensor):
                arrays[name] = value.q.copy()
                arrays[name + EXPONENT_SUFFIX] = np.array(value.e, np.int32)
            else:
                arrays[name] = np.array(value)
        reply = cls(arrays)
        reply.metrics["num-examples"] = examples
        return reply

    def build(self, node: int) -> Message:
        metadata = Metadata(
            run_id=1,
            message_id=uuid.uuid4().hex,
            src_node_id=node,
            dst_node_id=0,
            reply_to_message_id=uuid.uuid4().hex,
            group_id="1",
            created_at=time.time(),
            ttl=600.0,
            message_type="train",
        )
        if self.error is not None:
            return Message(metadata=metadata, error=Error(1, self.error))
        content = RecordDict()
        for i in range(self.array_records):
            content[f"arrays{i or ''}"] = ArrayRecord(
                {
                    k: v if isinstance(v, Array) else Array(np.require(v, requirements="C"))
                    for k, v in self.arrays.items()
                }
            )
        for i in range(self.metric_records):
            content[f"metrics{i or ''}"] = MetricRecord(dict(self.metrics))
        if self.config_record:
            content["config"] = ConfigRecord({"note": "hello"})
        return Message(metadata=metadata, content=content)


@dataclass
class FLCase:
    label: str
    integer: bool
    change: object  # change(reply, rng) in place
    kind: str  # "reject": refused by name; "poison": valid, cut back by a robust rule
    needle: str = ""  # what the rejection reason must hold


def _set_metric(key, value):
    return lambda r, rng: r.metrics.__setitem__(key, value)


def _first_weight(r):
    return next(k for k in r.arrays if k.endswith(".w"))


def metric_faults(rng) -> list[FLCase]:
    cases = []
    for integer in (True, False):
        for key in HONEST_METRICS:
            cases.append(FLCase(f"missing-{key}", integer, lambda r, g, k=key: r.metrics.pop(k), "reject", key))
        cases.append(FLCase("extra-metric", integer, _set_metric("gradient_norm", 1.0), "reject", "gradient_norm"))
        for key, value, needle in (
            ("upload_bytes", [1, 2], "upload_bytes"),
            ("train_loss", [0.5, 0.25], "train_loss"),
            ("num-examples", 10**12, "num-examples"),
            ("num-examples", 1e300, "num-examples"),
            ("num-examples", (1 << 63) - 1, "num-examples"),
            ("num-examples", 0, "num-examples"),
            ("num-examples", -5, "num-examples"),
            ("num-examples", 2.5, "num-examples"),
            ("num-examples", float("nan"), "num-examples"),
            ("num-examples", float("inf"), "num-examples"),
            ("num-examples", 1 << 70, "num-examples"),
            ("train_accuracy", 1.5, "train_accuracy"),
            ("train_loss", float("inf"), "train_loss"),
            ("time_s", -1.0, "time_s"),
            ("upload_bytes", float("nan"), "upload_bytes"),
            ("steps", 0.5, "steps"),
            ("num-examples", rng.randint(10**7, 10**9), "num-examples"),
        ):
            cases.append(FLCase(f"{key}={value!r:.20}", integer, _set_metric(key, value), "reject", needle))
    return cases


def record_faults() -> list[FLCase]:
    cases = []
    for integer in (True, False):
        for label, change in (
            ("no-arrays", lambda r, g: setattr(r, "array_records", 0)),
            ("two-arrays", lambda r, g: setattr(r, "array_records", 2)),
            ("no-metrics", lambda r, g: setattr(r, "metric_records", 0)),
            ("two-metrics", lambda r, g: setattr(r, "metric_records", 2)),
            ("config-record", lambda r, g: setattr(r, "config_record", True)),
            ("empty", lambda r, g: (setattr(r, "array_records", 0), setattr(r, "metric_records", 0))),
        ):
            cases.append(FLCase(label, integer, change, "reject", "Record"))
        cases.append(FLCase("client-error", integer, lambda r, g: setattr(r, "error", "ValueError: boom"), "failed"))
    return cases


def _garbage(r, g):
    key = _first_weight(r)
    r.arrays[key] = Array(dtype="int8", shape=(10**9, 10**3), stype="numpy.ndarray", data=g.randbytes(64))


def _exponent(value):
    def change(r, g):
        key = _first_weight(r) + EXPONENT_SUFFIX
        r.arrays[key] = value if isinstance(value, np.ndarray) else np.array(value, np.int32)

    return change


def array_faults(rng) -> list[FLCase]:
    cases = []
    for integer in (True, False):
        cases += [
            FLCase("missing-tensor", integer, lambda r, g: r.arrays.pop("fc1.w"), "reject", "fc1.w"),
            FLCase(
                "extra-tensor",
                integer,
                lambda r, g: r.arrays.__setitem__("fc9.w", np.zeros(3, np.float32)),
                "reject",
                "fc9.w",
            ),
            FLCase(
                "wrong-shape",
                integer,
                lambda r, g: r.arrays.__setitem__("fc1.w", np.zeros((10, 55), r.arrays["fc1.w"].dtype)),
                "reject",
                "fc1.w",
            ),
            FLCase(
                "transposed",
                integer,
                lambda r, g: r.arrays.__setitem__("fc1.w", r.arrays["fc1.w"].T.copy()),
                "reject",
                "fc1.w",
            ),
            FLCase(
                "scalar-tensor",
                integer,
                lambda r, g: r.arrays.__setitem__("conv1.w", np.array(3, np.int8)),
                "reject",
                "conv1.w",
            ),
            FLCase(
                "bn-wrong-dtype",
                integer,
                lambda r, g: r.arrays.__setitem__("bn1.gamma", r.arrays["bn1.gamma"].astype(np.float64)),
                "reject",
                "bn1.gamma",
            ),
            FLCase(
                "bn-nan",
                integer,
                lambda r, g: r.arrays["bn1.mean"].__setitem__(g.randrange(6), np.nan),
                "reject",
                "bn1.mean",
            ),
            FLCase("corrupt-bytes", integer, _garbage, "reject", "cannot be read"),
            FLCase(
                "orphan-exponent",
                integer,
                lambda r, g: r.arrays.__setitem__("ghost.w" + EXPONENT_SUFFIX, np.array(0, np.int32)),
                "reject",
                "ghost.w",
            ),
        ]
        for dtype in (np.int16, np.uint8, np.float32, np.float64, np.int64):
            if dtype == (np.int8 if integer else np.float32):
                continue
            cases.append(
                FLCase(
                    f"dtype-{np.dtype(dtype).name}",
                    integer,
                    lambda r, g, d=dtype: r.arrays.__setitem__("conv1.w", r.arrays["conv1.w"].astype(d)),
                    "reject",
                    "conv1.w",
                )
            )
    for bad in (5, -5, 100, -(1 << 31), (1 << 31) - 1):
        cases.append(
            FLCase(
                f"exponent{bad:+d}",
                True,
                lambda r, g, b=bad: _exponent(
                    np.array(r.arrays[_first_weight(r) + EXPONENT_SUFFIX] + b if abs(b) < 1000 else b, np.int64)
                )(r, g),
                "reject",
                "exponent",
            )
        )
    cases += [
        FLCase("exponent-float", True, _exponent(np.array(-7.0, np.float32)), "reject", "exponent"),
        FLCase("exponent-vector", True, _exponent(np.array([-7, -7], np.int32)), "reject", "exponent"),
        FLCase(
            "exponent-missing",
            True,
            lambda r, g: r.arrays.pop(_first_weight(r) + EXPONENT_SUFFIX),
            "reject",
            "exponent",
        ),
        FLCase(
            "int8-minus-128",
            True,
            lambda r, g: r.arrays["fc1.w"].__setitem__((0, g.randrange(54)), -128),
            "reject",
            "fc1.w",
        ),
        FLCase(
            "exponent-on-float",
            False,
            lambda r, g: r.arrays.__setitem__("fc1.w" + EXPONENT_SUFFIX, np.array(-7, np.int32)),
            "reject",
            "fc1.w",
        ),
    ]
    for value in (np.nan, np.inf, -np.inf):
        cases.append(
            FLCase(
                f"float-{value}",
                False,
                lambda r, g, v=value: r.arrays["fc1.w"].__setitem__((g.randrange(10), g.randrange(54)), v),
                "reject",
                "NaN or infinite",
            )
        )
    return cases


def poison_faults() -> list[FLCase]:
    """Valid and hostile: every check passes."""

    def saturate(sign, raise_by):
        def change(r, g):
            for key in list(r.arrays):
                if key.endswith(".w"):
                    r.arrays[key] = np.full_like(r.arrays[key], 127 * sign)
                    r.arrays[key + EXPONENT_SUFFIX] = r.arrays[key + EXPONENT_SUFFIX] + raise_by

        return change

    def huge(value):
        def change(r, g):
            for key in list(r.arrays):
                if key.endswith(".w"):
                    r.arrays[key] = np.full_like(r.arrays[key], value)

        return change

    def flipped(r, g):
        for key in list(r.arrays):
            if key.endswith(".w"):
                r.arrays[key] = (-20 * r.arrays[key]).astype(r.arrays[key].dtype)

    return [
        FLCase("int8-127-exp+4", True, saturate(1, 4), "poison"),
        FLCase("int8--127-exp+4", True, saturate(-1, 4), "poison"),
        FLCase("int8-127", True, saturate(1, 0), "poison"),
        FLCase("fp32-3e38", False, huge(3e38), "poison"),
        FLCase("fp32--3e38", False, huge(-3e38), "poison"),
        FLCase("fp32-flipped-x20", False, flipped, "poison"),
        FLCase(
            "bn-mean-1e30", False, lambda r, g: r.arrays.__setitem__("bn1.mean", np.full(6, 1e30, np.float32)), "poison"
        ),
        FLCase("examples-at-the-cap", True, lambda r, g: r.metrics.__setitem__("num-examples", 50_000), "poison"),
        FLCase("examples-at-the-cap-fp32", False, lambda r, g: r.metrics.__setitem__("num-examples", 50_000), "poison"),
    ]


def hostile_replies(seed: int = 31) -> list[FLCase]:
    rng = random.Random(seed)
    return [*metric_faults(rng), *record_faults(), *array_faults(rng), *poison_faults()]
