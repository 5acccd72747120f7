"""NITI's batch norm between int8 tensors as one op each way: a graph rewrite after lowering.

int_mixed.py runs a batch norm of a mobile CNN as FP32's float op between casts, so a
layer that reads int8 and feeds an int8 product is, forward,

    niti.to_float -> fp32.bn_fwd -> [fp32.act_fwd clip | fp32.relu_fwd] -> niti.to_int8

and backward the mirror (niti.to_float -> [act_bwd | relu_bwd] -> fp32.bn_bwd ->
niti.to_int8). Every link writes a full-size float32 tensor, and the forward keeps three
of them (the normalised input, the batch norm's output, the cast's input) for the
backward: on MobileNetV2 these float ops were most of the step and of its memory.

Where a chain has exactly that shape -- each float tensor read by the next link alone,
and by its own backward op -- it becomes `niti.bn_act_fwd` (hook `bn_act_s8`) and
`niti.bn_act_bwd` (hook `bn_act_bwd_s8`), with the same results bit for bit: the base.py
composition of those hooks is the chain itself (the judge), and cpu_ops/bn_cast.cpp
computes the same expressions in the same order from int8, keeping for the backward the
layer's int8 input and its per-channel mean and 1/std (float64, `<layer>.stats`) instead of
float32 activations. Each fused op keeps the id of the cast whose rounding it does (the key
of its random bits) and sits where the chain's first op the rest of the step depends on
did: the forward at its cast, the backward at the batch norm's backward (its gamma and
beta gradients are read by the updates that follow it).

A batch norm whose output also feeds a residual add (a block's projection) or a frozen
batch norm (its backward scales by the running statistics) keeps its float ops.
"""

from __future__ import annotations

import dataclasses

from ._fusions import op_links

FWD, BWD = "niti.bn_act_fwd", "niti.bn_act_bwd"
TO_FLOAT, TO_INT8 = "niti.to_float", "niti.to_int8"
BN_FWD, BN_BWD = "fp32.bn_fwd", "fp32.bn_bwd"
ACTS = {"fp32.act_fwd": "fp32.act_bwd", "fp32.relu_fwd": "fp32.relu_bwd"}  # forward kind -> its backward's


@dataclasses.dataclass
class _Chain:
    """The ops of one fusable batch norm: forward cast, batch norm, activation (or None),
    cast to int8; backward cast, activation backward (or None), batch norm backward, error
    cast (or None: no layer below wants the error). No backward at all in a forward-only graph."""

    to_float: object
    bn: object
    act: object
    to_int8: object
    err_float: object = None
    act_bwd: object = None
    bn_bwd: object = None
    err_int8: object = None

    def activation(self) -> tuple:
        """bn_act_s8's act: ("none",), ("relu",) or ("clip", lo, hi)."""
        if self.act is None:
            return ("none",)
        if self.act.kind == "fp32.relu_fwd":
            return ("relu",)
        return ("clip", *(float(p) for p in self.act.attrs["params"]))

    def layers(self) -> tuple[str, ...]:
        """The model layers the fused ops run: the batch norm and its activation."""
        return (self.bn.layer,) + ((self.act.layer,) if self.act is not None else ())

    def float_tensors(self) -> list[str]:
        """The float32 tensors the chain's links write (but the running statistics and the
        gradients, which the fused ops write too)."""
        links = (self.to_float, self.act, self.err_float, self.act_bwd)
        written = [t for op in links if op is not None for t in op.outputs]
        written += list(self.bn.outputs[:3])
        if self.bn_bwd is not None:
            written.append(self.bn_bwd.outputs[0])
        return written


def _only(ops: list, kind: str):
    """The one op of `ops` if it is of `kind`, else None."""
    return ops[0] if len(ops) == 1 and ops[0].kind == kind else None


def _forward_part(bn, readers, producer):
    """The forward links around batch norm `bn` when they chain alone, else None."""
    to_float = producer.get(bn.inputs[0])
    if to_float is None or to_float.kind != TO_FLOAT or readers[bn.inputs[0]] != [bn]:
        return None
    y = bn.outputs[0]
    forward = [op for op in readers.get(y, []) if op.phase == "forward"]
    act, out = None, y
    if len(forward) == 1 and forward[0].kind in ACTS:
        act = forward[0]
        if act.kind == "fp32.act_fwd" and act.attrs.get("function") != "clip":
            return None
        out = act.outputs[0]
        forward = [op for op in readers.get(out, []) if op.phase == "forward"]
    to_int8 = _only(forward, TO_INT8)
    return None if to_int8 is None else _Chain(to_float, bn, act, to_int8)


def _backward_part(chain, readers, producer) -> bool:
    """Fill `chain`'s backward links; False when they are not the mirror chain, or when
    something else reads a float tensor the fusion drops."""
    bn, act = chain.bn, chain.act
    y, xhat, inv = bn.outputs[:3]
    out = act.outputs[0] if act is not None else y

    def late(t):
        return [op for op in readers.get(t, []) if op.phase != "forward"]

    if not (late(y) or late(xhat) or late(inv) or late(out)):
        return True  # nothing reads them after the forward (an evaluation graph)
    bn_bwd = _only(late(xhat), BN_BWD)
    if bn_bwd is None or late(inv) != [bn_bwd] or bn_bwd.inputs[1:3] != (xhat, inv):
        return False
    err = bn_bwd.inputs[0]
    if act is not None:  # clip's backward reads the batch norm's output, ReLU's its own
        gate = y if act.kind == "fp32.act_fwd" else out
        act_bwd = _only(late(gate), ACTS[act.kind])
        if act_bwd is None or act_bwd.inputs[1] != gate or act_bwd.outputs[0] != err or readers[err] != [bn_bwd]:
            return False
        if late(y if gate is out else out):
            return False
        chain.act_bwd, err = act_bwd, act_bwd.inputs[0]
    elif late(y):
        return False
    err_float = producer.get(err)
    if err_float is None or err_float.kind != TO_FLOAT or len(readers[err]) != 1:
        return False
    below = readers.get(bn_bwd.outputs[0], [])
    if below and _only(below, TO_INT8) is None:
        return False
    chain.err_float, chain.bn_bwd, chain.err_int8 = err_float, bn_bwd, (below[0] if below else None)
    return True


def _chains(ops):
    readers, producer = op_links(ops)
    for bn in ops:
        if bn.kind != BN_FWD:
            continue
        chain = _forward_part(bn, readers, producer)
        if chain is not None and _backward_part(chain, readers, producer):
            yield chain


def fuse_bn_casts(ops: list, eval_ops: list, tensors: dict) -> tuple[list, list]:
    """(ops, eval_ops) with each fusable batch norm chain (module docstring) as one op each way;
    the float tensors no op reads any more leave `tensors`."""
    new, dropped, floats = {}, set(), []
    for chain in list(_chains(ops)):
        floats += chain.float_tensors()
        bn, cast = chain.bn, chain.to_int8
        x, gamma, beta, mean, var = (chain.to_float.inputs[0], *bn.inputs[1:])
        stats = f"{bn.layer}.stats"
        # a TensorSpec made from one (algorithms come after graph: no import of it)
        spec = tensors[mean]
        tensors[stats] = dataclasses.replace(spec, name=stats, shape=(2, *spec.shape), dtype="float64", role="saved")
        act = chain.activation()
        new[cast.name] = dataclasses.replace(
            cast,
            name=bn.name,
            kind=FWD,
            layer=bn.layer,
            inputs=(x, gamma, beta, mean, var),
            outputs=(cast.outputs[0], stats, mean, var),
            hooks=("bn_act_s8",),
            macs=bn.macs,
            # fused: the layers whose float ops it runs, with their casts (precision.py reports them)
            attrs={**bn.attrs, "act": act, "mode": cast.attrs["mode"], "fused": chain.layers()},
        )
        dropped.update(op.name for op in (chain.to_float, bn, chain.act) if op is not None)
        if chain.bn_bwd is not None:
            err_cast, bn_bwd = chain.err_int8, chain.bn_bwd
            keyed = err_cast or bn_bwd  # the op whose rounding keys the random bits
            outputs = ((err_cast.outputs[0],) if err_cast else ()) + bn_bwd.outputs[1:]
            new[bn_bwd.name] = dataclasses.replace(
                keyed,
                name=bn_bwd.name,
                kind=BWD,
                layer=bn.layer,
                phase="backward",
                inputs=(chain.err_float.inputs[0], x, stats, gamma, beta),
                outputs=outputs,
                hooks=("bn_act_bwd_s8",),
                macs=bn_bwd.macs,
                attrs={
                    "act": act,
                    "mode": err_cast.attrs["mode"] if err_cast else "round",
                    "rows": "coupled",
                    "fused": chain.layers(),
                },
            )
            if err_cast is not None:
                dropped.add(err_cast.name)
            dropped.update(op.name for op in (chain.err_float, chain.act_bwd) if op is not None)
    ops, eval_ops = _rewritten(ops, new, dropped), _rewritten(eval_ops, new, dropped)
    used = {t for op in (*ops, *eval_ops) for t in (*op.inputs, *op.outputs)}
    for name in floats:
        if name not in used:
            del tensors[name]
    return ops, eval_ops


def _rewritten(seq, new: dict, dropped: set) -> list:
    """`seq` with each op named in `new` put in the place of the op of that name (the fused op
    keeps its name: the cast's forward, the batch norm backward's backward) and `dropped` left out."""
    out = []
    for op in seq:
        if op.name in new:
            out.append(new[op.name])
        elif op.name not in dropped:
            out.append(op)
    return out


# ---------------------------------------------------------------- running ops


def bn_act_fwd(backend, op, env, ctx) -> dict:
    x, gamma, beta, mean, var = (env[t] for t in op.inputs)
    a = op.attrs
    out = backend.bn_act_s8(
        x, gamma, beta, mean, var, a["training"], a["momentum"], a["eps"], a["act"], a["mode"], ctx.rng(op)
    )
    return dict(zip(op.outputs, out))


def bn_act_bwd(backend, op, env, ctx) -> dict:
    err, x, stats, gamma, beta = (env[t] for t in op.inputs)
    input_error = len(op.outputs) == 3
    dx, d_gamma, d_beta = backend.bn_act_bwd_s8(
        err, x, stats, gamma, beta, op.attrs["act"], op.attrs["mode"], ctx.rng(op), input_error=input_error
    )
    return dict(zip(op.outputs, (dx, d_gamma, d_beta) if input_error else (d_gamma, d_beta)))


OPS = {FWD: bn_act_fwd, BWD: bn_act_bwd}
