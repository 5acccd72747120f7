"""Graph rewrites the float recipes share after lowering: a ReLU whose output only a
max-pool reads becomes one op with it each way (`fp32.relu_maxpool_fwd`,
`fp32.relu_maxpool_bwd`), so a step makes neither the full-size ReLU output nor the
full-size error between the pool's backward and the ReLU's (LeNet-5: the first layer's
largest float tensors) and runs two ops fewer a pair.

The rewrite changes no result: the forward is maxpool_f32(relu_f32(x)) (the ReLU applied
to each tap as the pool reads it), and the backward, from the pooled y,
maxpool_bwd_f32(relu_bwd_f32(err, y)) equals relu_bwd_f32(maxpool_bwd_f32(err), relu_f32(x)):
a window's error lands on its argmax cell, whose ReLU output is y, and every other cell
gets +0.0 either way.

Under Octo a ReLU that alone reads a layer's compensated output (LeNet-5's fc1 and fc2)
goes into that layer's ops instead: the product's epilogue applies it as it writes the
output (`octo.product_comp` with attrs["relu"]: dequantize_compensate's relu), and the
compensation's backward takes the error where the ReLU's output is > 0 (`octo.comp_bwd`
with the ReLU's output as a fourth input, compensation_bwd's gate): relu_bwd_f32's select,
then the same arithmetic. Ops keep their ids (the keys of their random bits).

And under Octo a max-pool's backward (plain or with its ReLU) whose input error only the
layer's comp_bwd reads goes into that comp_bwd when its windows do not overlap
(`octo.pool_comp_bwd`, the pool_compensation_bwd hook): the full-size error between them
(LeNet-5's conv1: the step's largest float error) is made a cache-sized chunk at a time
as the compensation's backward reads it, with the same values in the same order, so the
same bits.
"""

from __future__ import annotations

import dataclasses

PRODUCT_COMP, COMP_BWD, POOL_COMP_BWD = "octo.product_comp", "octo.comp_bwd", "octo.pool_comp_bwd"
RELU, POOL = "fp32.relu_fwd", "fp32.maxpool_fwd"
RELU_BWD, POOL_BWD = "fp32.relu_bwd", "fp32.maxpool_bwd"
FUSED_FWD, FUSED_BWD = "fp32.relu_maxpool_fwd", "fp32.relu_maxpool_bwd"


def op_links(ops) -> tuple[dict, dict]:
    """(tensor -> the ops that read it, tensor -> the op that writes it first) over `ops`."""
    readers: dict[str, list] = {}
    producer = {}
    for op in ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
        for t in op.outputs:
            producer.setdefault(t, op)
    return readers, producer


def _rewritten(seq, new: dict, dropped: set) -> list:
    """`seq` with each op named in `new` replaced by its fused op and the `dropped` ones left out."""
    return [new.get(op.name, op) for op in seq if op.name not in dropped]


def _pairs(ops):
    """(relu, pool, relu_bwd or None, pool_bwd or None) for each ReLU whose output only a
    max-pool reads, and in the backward only the ReLU's backward, fed by that pool's own
    backward alone."""
    readers, producer = op_links(ops)
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
        if (
            pool_bwd is not None
            and pool_bwd.kind == POOL_BWD
            and pool_bwd.inputs[1] == pool.outputs[1]
            and readers[relu_bwd.inputs[0]] == [relu_bwd]
        ):
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
        if relu_bwd is not None:  # at the ReLU backward's place: its error is what the layers below read
            dropped.add(pool_bwd.name)
            new[relu_bwd.name] = dataclasses.replace(
                pool_bwd,
                kind=FUSED_BWD,
                inputs=(pool_bwd.inputs[0], pool.outputs[0], pool.outputs[1]),
                outputs=relu_bwd.outputs,
                hooks=("relu_maxpool_bwd_f32",),
            )
            del tensors[relu_bwd.inputs[0]]

    return _rewritten(ops, new, dropped), _rewritten(eval_ops, new, dropped)


def fuse_relu_into_compensation(ops: list, eval_ops: list, tensors: dict) -> tuple[list, list]:
    """(ops, eval_ops) with each ReLU whose input only it reads, an Octo product_comp's
    compensated output, folded into that op (which then writes the ReLU's output), and its
    backward, when the error it makes only the layer's comp_bwd reads, into the comp_bwd."""
    readers, producer = op_links(ops)
    new, dropped = {}, set()
    for relu in ops:
        product = producer.get(relu.inputs[0]) if relu.kind == RELU else None
        if product is None or product.kind != PRODUCT_COMP or product.outputs[1] != relu.inputs[0]:
            continue
        relu_bwds = [
            op for op in readers.get(relu.outputs[0], []) if op.kind == RELU_BWD and op.inputs[1] == relu.outputs[0]
        ]
        fwd_readers = [op for op in readers[relu.inputs[0]] if op is not relu]
        comp = None
        if relu_bwds:
            comps = readers.get(relu_bwds[0].outputs[0], [])
            if (
                len(relu_bwds) == 1
                and len(comps) == 1
                and comps[0].kind == COMP_BWD
                and comps[0].inputs[0] == relu_bwds[0].outputs[0]
            ):
                comp = comps[0]
        if fwd_readers or (relu_bwds and comp is None):
            continue
        new[product.name] = dataclasses.replace(
            product, outputs=(product.outputs[0], relu.outputs[0]), attrs={**product.attrs, "relu": True}
        )
        dropped.add(relu.name)
        del tensors[relu.inputs[0]]
        if comp is not None:
            relu_bwd = relu_bwds[0]
            new[comp.name] = dataclasses.replace(comp, inputs=(relu_bwd.inputs[0], *comp.inputs[1:], relu.outputs[0]))
            dropped.add(relu_bwd.name)
            del tensors[relu_bwd.outputs[0]]

    return _rewritten(ops, new, dropped), _rewritten(eval_ops, new, dropped)


def fuse_pool_into_compensation(ops: list, eval_ops: list, tensors: dict) -> tuple[list, list]:
    """(ops, eval_ops) with each comp_bwd (no gate) that alone reads a max-pool backward's
    error, windows not overlapping, and that backward as one op at the comp_bwd's place:
    inputs (pooled err, argmax, raw product, scale[, pooled y: the ReLU's gate])."""
    readers, producer = op_links(ops)
    new, dropped = {}, set()
    for comp in ops:
        if comp.kind != COMP_BWD or len(comp.inputs) != 3:
            continue
        pool_bwd = producer.get(comp.inputs[0])
        if (
            pool_bwd is None
            or pool_bwd.kind not in (POOL_BWD, FUSED_BWD)
            or readers[comp.inputs[0]] != [comp]
            or pool_bwd.attrs["kernel"] > pool_bwd.attrs["stride"]
        ):
            continue
        if pool_bwd.kind == POOL_BWD:  # (err, argmax)
            err, argmax, gate = pool_bwd.inputs[0], pool_bwd.inputs[1], ()
        else:  # (err, pooled y, argmax)
            err, argmax, gate = pool_bwd.inputs[0], pool_bwd.inputs[2], (pool_bwd.inputs[1],)
        new[comp.name] = dataclasses.replace(
            comp,
            kind=POOL_COMP_BWD,
            inputs=(err, argmax, *comp.inputs[1:], *gate),
            hooks=("pool_compensation_bwd",),
            attrs={**comp.attrs, "kernel": pool_bwd.attrs["kernel"], "stride": pool_bwd.attrs["stride"]},
        )
        dropped.add(pool_bwd.name)
        del tensors[comp.inputs[0]]

    return _rewritten(ops, new, dropped), eval_ops
