"""A model's weights as a Flower ArrayRecord and back.

Only the model travels: each parametric layer's weight (`<layer>.w`) and batch-norm
state. Optimizer state (momentum buffers, recipe controllers) stays on the client and
starts afresh every round, as in FedAvg.

An integer tensor `(q, e)` travels as two arrays: `<name>` holds q in its own dtype
(int8 for NITI: one byte per weight) and `<name>.exp` a 0-d int32 with e. Float tensors
travel as themselves. The record is self-describing, so the server needs no side channel
to know which tensors are integers.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.common.serde import recorddict_to_proto

from ..numerics import QTensor
from .validate import UpdateError

EXPONENT_SUFFIX = ".exp"
_BN_SUFFIXES = (".gamma", ".beta", ".mean", ".var")


def model_names(model, state: dict) -> list[str]:
    """The state entries that make up the model (what FedAvg averages), in layer order."""
    names = []
    for layer in model.layers:
        for name in (f"{layer.name}.w", f"{layer.name}.b", *(f"{layer.name}{s}" for s in _BN_SUFFIXES)):
            if name in state:
                names.append(name)
    return names


def to_record(state: dict, names: list[str]) -> ArrayRecord:
    record = ArrayRecord()
    for name in names:
        value = state[name]
        if isinstance(value, QTensor):
            record[name] = Array(np.ascontiguousarray(value.q))
            record[name + EXPONENT_SUFFIX] = Array(np.array(value.e, np.int32))
        else:
            record[name] = Array(np.ascontiguousarray(value))
    return record


def from_record(record: ArrayRecord, source: str = "update") -> dict:
    """{name: QTensor or ndarray}; an exponent without its tensor, or a non-integer or
    non-scalar exponent, is an UpdateError naming the key."""
    arrays = {}
    try:
        for key in record.keys():
            arrays[key] = record[key].numpy()
    except Exception as exc:  # a corrupt Array fails inside Flower's/NumPy's deserializer
        raise UpdateError(f"{source}: array {key!r} cannot be read ({exc})") from None
    state = {}
    for key, value in arrays.items():
        if key.endswith(EXPONENT_SUFFIX):
            owner = key[: -len(EXPONENT_SUFFIX)]
            if owner not in arrays:
                raise UpdateError(f"{source}: exponent {key!r} has no tensor {owner!r}")
            continue
        exponent = arrays.get(key + EXPONENT_SUFFIX)
        if exponent is None:
            state[key] = value
            continue
        if exponent.shape != () or exponent.dtype.kind not in "iu":
            raise UpdateError(
                f"{source}: exponent {key + EXPONENT_SUFFIX!r} must be a scalar integer, "
                f"got {exponent.dtype} {exponent.shape}"
            )
        state[key] = QTensor(value, int(exponent))
    return state


def record_bytes(content: RecordDict | ArrayRecord) -> int:
    """Bytes of the record as Flower puts it on the wire (its protobuf encoding)."""
    if isinstance(content, ArrayRecord):
        content = RecordDict({"arrays": content})
    return recorddict_to_proto(content).ByteSize()
