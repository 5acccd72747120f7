"""Graph rewrites the float recipes share after lowering: a ReLU whose output only a
max-pool reads becomes one op with it each way (`fp32.relu_maxpool_fwd`,
`fp32.relu_maxpool_bwd`), so a step makes neither the full-size ReLU output nor the
full-size error between the pool's backward and the ReLU's (LeNet-5: the first layer's
largest float tensors) and runs two ops fewer a pair.

The rewrite changes no result: the forward is maxpool_f32(relu_f32(x)) (the ReLU applied
to each tap as the pool reads it), and the backward, from the pooled y,
maxpool_bwd_f32(relu_bwd_f32(err, y)) equals relu_bwd_f32(maxpool_bwd_f32(err), relu_f32(x)):
a window's error lands on its argmax cell, whose ReLU output is y, and every other cell
gets +0.0 either way. Ops keep their ids (the keys of their random bits).
"""
from __future__ import annotations

import dataclasses

RELU, POOL = "fp32.relu_fwd", "fp32.maxpool_fwd"
RELU_BWD, POOL_BWD = "fp32.relu_bwd", "fp32.maxpool_bwd"
FUSED_FWD, FUSED_BWD = "fp32.relu_maxpool_fwd", "fp32.relu_maxpool_bwd"


def _pairs(ops):
    """(relu, pool, relu_bwd or None, pool_bwd or None) for each ReLU whose output only a
    max-pool reads, and in the backward only the ReLU's backward, fed by that pool's own
    backward alone."""
    readers: dict[str, list] = {}
    producer = {}
    for op in ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
        for t in op.outputs:
            producer.setdefault(t, op)
    for pool in ops:
        relu = producer.get(pool.inputs[0]) if pool.kind == POOL else None
        if relu is None or relu.kind != RELU:
            continue
        others = [op for op in readers[pool.inputs[0]] if op is not pool]
        if not others:
            yield relu, pool, None, None
            continue
        relu_bwd = others[0]
        if len(others) != 1 or relu_bwd.kind != RELU_BWD or relu_bwd.inputs[1] != pool.inputs[0]:
            continue
        pool_bwd = producer.get(relu_bwd.inputs[0])
        if (pool_bwd is not None and pool_bwd.kind == POOL_BWD and pool_bwd.inputs[1] == pool.outputs[1]
                and readers[relu_bwd.inputs[0]] == [relu_bwd]):
            yield relu, pool, relu_bwd, pool_bwd


def fuse_relu_pool(ops: list, eval_ops: list, tensors: dict) -> tuple[list, list]:
    """(ops, eval_ops) with each fusable ReLU and max-pool pair as one op each way, chosen on
    `ops` (the evaluation's forward ops are the same Op objects, so the same pairs go there);
    the tensors no op writes any more leave `tensors`."""
    new, dropped = {}, set()
    for relu, pool, relu_bwd, pool_bwd in list(_pairs(ops)):
        dropped.add(relu.name)
        new[pool.name] = dataclasses.replace(pool, kind=FUSED_FWD, inputs=relu.inputs, hooks=("relu_maxpool_f32",))
        del tensors[pool.inputs[0]]
        if relu_bwd is not None:   # at the ReLU backward's place: its error is what the layers below read
            dropped.add(pool_bwd.name)
            new[relu_bwd.name] = dataclasses.replace(
                pool_bwd, kind=FUSED_BWD, inputs=(pool_bwd.inputs[0], pool.outputs[0], pool.outputs[1]),
                outputs=relu_bwd.outputs, hooks=("relu_maxpool_bwd_f32",))
            del tensors[relu_bwd.inputs[0]]

    def rewritten(seq):
        return [new.get(op.name, op) for op in seq if op.name not in dropped]

    return rewritten(ops), rewritten(eval_ops)
