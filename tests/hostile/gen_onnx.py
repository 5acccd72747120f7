"""A seeded generator of hostile ONNX files, by class of fault.

Every case starts from one small model that imports (Conv -> Relu -> MaxPool -> Flatten ->
Gemm whose weight is a Constant node) and breaks one thing: an attribute (stride 0 or 1.5,
a missing kernel_shape, negative pads, a wrong type), a tensor (NaN/Inf, complex64,
negative or overflowing dims, data of the wrong length), the graph (ir_version, repeated
or missing outputs, undefined inputs, subgraphs), external data (outside the folder, a
symlink, a FIFO, /dev/zero, the working directory's file of the same name) or the file
itself (a FIFO, /dev/zero, 2.5 GB, truncated). Each case names the pieces its error
line must hold: the file and, where there is one, the node or tensor.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NODES = ("conv1", "relu1", "pool1", "flat", "fcw", "fc")
CANARY = b"SECRET-OUTSIDE-THE-MODEL-FOLDER\n"


@dataclass
class OnnxCase:
    label: str
    path: Path
    needles: tuple[str, ...]


def base_model(rng: random.Random | None = None) -> onnx.ModelProto:
    """The model every case breaks: 1x8x8 in, 10 classes out; imports as it is."""
    gen = np.random.default_rng(rng.randrange(1 << 30) if rng else 0)
    conv_w = gen.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32)
    conv_b = gen.normal(0, 0.1, (4,)).astype(np.float32)
    fc_w = gen.normal(0, 0.1, (10, 64)).astype(np.float32)
    fc_b = gen.normal(0, 0.1, (10,)).astype(np.float32)
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "conv1.weight", "conv1.bias"],
            ["c1"],
            name="conv1",
            kernel_shape=[3, 3],
            strides=[1, 1],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p1"], ["f"], name="flat", axis=1),
        helper.make_node("Constant", [], ["fc.weight"], name="fcw", value=numpy_helper.from_array(fc_w, "fcw")),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 10])],
        [
            numpy_helper.from_array(conv_w, "conv1.weight"),
            numpy_helper.from_array(conv_b, "conv1.bias"),
            numpy_helper.from_array(fc_b, "fc.bias"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def node(model, name):
    return next(n for n in model.graph.node if n.name == name)


def tensor(model, name) -> TensorProto:
    """An initializer by name, or the Constant node's value ('fcw')."""
    if name == "fcw":
        return next(a for a in node(model, "fcw").attribute if a.name == "value").t
    return next(t for t in model.graph.initializer if t.name == name)


def set_attr(n, name, value):
    keep = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(keep)
    if value is not None:
        n.attribute.append(value if isinstance(value, onnx.AttributeProto) else helper.make_attribute(name, value))


def tensor_label(name):
    return "node 'fcw' (Constant)" if name == "fcw" else f"initializer {name!r}"


# ---------------------------------------------------------------- attribute faults


def attribute_faults(rng):
    for target in ("conv1", "pool1"):
        for bad in (0, -1, -(1 << 40), 1 << 40, 70_000, rng.randint(-9, -2)):
            yield (
                f"strides={bad}@{target}",
                lambda m, t=target, b=bad: set_attr(node(m, t), "strides", [b, b]),
                (f"node {target!r}", "strides"),
            )
        yield (
            f"strides=1.5@{target}",
            lambda m, t=target: set_attr(node(m, t), "strides", [1.5, 1.5]),
            (f"node {target!r}", "strides", "floats"),
        )
        yield (
            f"strides-int@{target}",
            lambda m, t=target: set_attr(node(m, t), "strides", 2),
            (f"node {target!r}", "strides"),
        )
        yield (
            f"strides-string@{target}",
            lambda m, t=target: set_attr(node(m, t), "strides", "two"),
            (f"node {target!r}", "strides"),
        )
        for bad in (0, -3, 1 << 33):
            yield (
                f"kernel_shape={bad}@{target}",
                lambda m, t=target, b=bad: set_attr(node(m, t), "kernel_shape", [b, b]),
                (f"node {target!r}", "kernel_shape"),
            )
        for bad in (-1, 1 << 20, -(1 << 62)):
            yield (
                f"pads={bad}@{target}",
                lambda m, t=target, b=bad: set_attr(node(m, t), "pads", [b] * 4),
                (f"node {target!r}", "pads"),
            )
        yield (
            f"dilations=0@{target}",
            lambda m, t=target: set_attr(node(m, t), "dilations", [0, 0]),
            (f"node {target!r}", "dilations"),
        )
        yield (
            f"unknown-attr@{target}",
            lambda m, t=target: set_attr(node(m, t), "stride_hint", 2),
            (f"node {target!r}", "stride_hint"),
        )
        yield (
            f"untyped-attr@{target}",
            lambda m, t=target: set_attr(node(m, t), "strides", onnx.AttributeProto(name="strides")),
            (f"node {target!r}", "strides"),
        )
        yield (
            f"twice-attr@{target}",
            lambda m, t=target: node(m, t).attribute.append(helper.make_attribute("strides", [1, 1])),
            (f"node {target!r}", "twice"),
        )
    yield (
        "maxpool-without-kernel_shape",
        lambda m: set_attr(node(m, "pool1"), "kernel_shape", None),
        ("node 'pool1'", "kernel_shape"),
    )
    yield "conv-group-0", lambda m: set_attr(node(m, "conv1"), "group", 0), ("node 'conv1'", "group")
    for bad in (float("nan"), float("inf"), -float("inf")):
        yield f"gemm-alpha={bad}", lambda m, b=bad: set_attr(node(m, "fc"), "alpha", b), ("node 'fc'", "alpha")
    yield (
        "gemm-graph-attr",
        lambda m: set_attr(node(m, "fc"), "body", helper.make_graph([], "g", [], [])),
        ("node 'fc'", "body"),
    )


# ---------------------------------------------------------------- tensor faults


def _poison(values: str, rng):
    def apply(m, name):
        t = tensor(m, name)
        array = numpy_helper.to_array(t).copy()
        flat = array.reshape(-1)
        for _ in range(rng.randint(1, 3)):
            flat[rng.randrange(flat.size)] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[values]
        t.CopyFrom(numpy_helper.from_array(array, t.name))

    return apply


def _retype(dtype):
    def apply(m, name):
        t = tensor(m, name)
        array = numpy_helper.to_array(t)
        if dtype in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
            t.CopyFrom(
                numpy_helper.from_array(
                    array.astype(np.complex64 if dtype == TensorProto.COMPLEX64 else np.complex128), t.name
                )
            )
        else:
            t.data_type = dtype

    return apply


def _dims(dims_of):
    def apply(m, name):
        t = tensor(m, name)
        new = dims_of(list(t.dims))
        del t.dims[:]
        t.dims.extend(new)

    return apply


def _raw(change):
    def apply(m, name):
        t = tensor(m, name)
        array = numpy_helper.to_array(t)
        t.CopyFrom(numpy_helper.from_array(array, t.name))
        t.raw_data = change(t.raw_data)

    return apply


def tensor_faults(rng):
    kinds = {
        "nan": _poison("nan", rng),
        "inf": _poison("inf", rng),
        "-inf": _poison("-inf", rng),
        "complex64": _retype(TensorProto.COMPLEX64),
        "complex128": _retype(TensorProto.COMPLEX128),
        "string": _retype(TensorProto.STRING),
        "undefined-type": _retype(0),
        "type-999": _retype(999),
        "float8": _retype(TensorProto.FLOAT8E4M3FN),
        "int4": _retype(TensorProto.INT4),
        "negative-dim": _dims(lambda d: [-rng.randint(1, 9)] + d[1:]),
        "overflowing-dims": _dims(lambda d: [1 << 31, 1 << 31] + d[2:]),
        "int64-max-dims": _dims(lambda d: [(1 << 63) - 1] + d[1:]),
        "short-data": _raw(lambda raw: raw[: rng.randrange(len(raw))]),
        "long-data": _raw(lambda raw: raw + bytes(rng.randint(1, 64))),
        "dims-say-zero": _dims(lambda d: [0] + d[1:]),
    }
    for name in ("conv1.weight", "conv1.bias", "fc.bias", "fcw"):
        for kind, apply in kinds.items():
            yield f"{kind}@{name}", lambda m, a=apply, n=name: a(m, n), (tensor_label(name),)


# ---------------------------------------------------------------- graph faults


def _rename_output(node_name, new):
    def apply(m):
        n = node(m, node_name)
        old = n.output[0]
        n.output[0] = new
        for other in m.graph.node:
            for i, name in enumerate(other.input):
                if name == old:
                    other.input[i] = new

    return apply


def graph_faults(rng):
    for version in (-1, -(1 << 40), 0, 10**9):
        yield f"ir_version={version}", lambda m, v=version: setattr(m, "ir_version", v), ("ir_version", str(version))
    yield "output-twice", lambda m: m.graph.output.append(m.graph.output[0]), ("'y'", "twice")
    yield "same-output-two-nodes", _rename_output("relu1", "c1"), ("node 'relu1'", "'c1'")
    yield "output-is-input", _rename_output("relu1", "x"), ("node 'relu1'", "'x'")
    yield "output-is-initializer", _rename_output("relu1", "conv1.weight"), ("node 'relu1'", "conv1.weight")
    for name in ("relu1", "flat", "fcw"):
        yield (
            f"no-outputs@{name}",
            lambda m, n=name: node(m, n).output.__delitem__(slice(None)),
            (f"node {name!r}", "output"),
        )
        yield (
            f"empty-output@{name}",
            lambda m, n=name: node(m, n).output.__setitem__(0, ""),
            (f"node {name!r}", "output"),
        )
    yield "undefined-input", lambda m: node(m, "relu1").input.__setitem__(0, "ghost"), ("node 'relu1'", "'ghost'")
    yield "reads-later-node", lambda m: node(m, "relu1").input.__setitem__(0, "p1"), ("node 'relu1'", "'p1'")
    yield "relu-two-inputs", lambda m: node(m, "relu1").input.append("c1"), ("node 'relu1'", "2 inputs")
    yield "conv-one-input", lambda m: node(m, "conv1").input.__delitem__(slice(1, None)), ("node 'conv1'", "1 inputs")
    yield "maxpool-three-outputs", lambda m: node(m, "pool1").output.extend(["i1", "i2"]), ("node 'pool1'", "outputs")
    for dims in ([None, 1, -8, 8], [None, 1, 1 << 40, 8], [None, -1, 8, 8], [None, 1, 8, 0]):
        yield (
            f"input-dims={dims}",
            lambda m, d=dims: m.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, d)),
            ("'x'",),
        )
    yield "initializer-twice", lambda m: m.graph.initializer.append(m.graph.initializer[0]), ("conv1.weight", "twice")
    yield "initializer-unnamed", lambda m: setattr(m.graph.initializer[2], "name", ""), ("no name",)
    yield "output-produced-by-none", lambda m: setattr(m.graph.output[0], "name", "nowhere"), ("'nowhere'",)
    yield (
        "sparse-initializer",
        lambda m: m.graph.sparse_initializer.append(
            helper.make_sparse_tensor(
                numpy_helper.from_array(np.ones(2, np.float32), "sv"),
                numpy_helper.from_array(np.array([0, 3]), "si"),
                [4],
            )
        ),
        ("sparse",),
    )
    yield (
        "subgraph-node",
        lambda m: m.graph.node.insert(
            1,
            helper.make_node(
                "If",
                ["cond"],
                ["z"],
                name="branch",
                then_branch=helper.make_graph([], "t", [], []),
                else_branch=helper.make_graph([], "e", [], []),
            ),
        ),
        ("node 'branch'",),
    )
    yield "no-nodes", lambda m: m.graph.node.__delitem__(slice(None)), ("no graph nodes",)


# ---------------------------------------------------------------- external data


def _external(name, location, offset=None, length=None):
    def apply(m, folder):
        t = tensor(m, name)
        raw = numpy_helper.to_array(t).tobytes()
        entries = {"location": location}
        if offset is not None:
            entries["offset"] = str(offset)
        if length is not None:
            entries["length"] = str(length)
        t.ClearField("float_data")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for key, value in entries.items():
            t.external_data.add(key=key, value=value)
        return raw

    return apply


def external_faults(root: Path, cwd: Path):
    """(label, apply(model, folder), needles): `apply` writes what the case needs beside the
    model and points the tensor at it. A copy of valid bytes sits outside the folder and,
    with the canary, in the working directory: reading either would import them."""
    outside = root / "outside.bin"
    for name in ("conv1.weight", "fcw"):
        nbytes = 4 * int(np.prod(tensor(base_model(), name).dims))
        label = tensor_label(name)

        def sym(target):
            def make(folder, t=target):
                link = folder / "link.bin"
                if not link.is_symlink():
                    link.symlink_to(t)
                return "link.bin"

            return make

        def fifo(folder):
            if not (folder / "pipe.bin").exists():
                os.mkfifo(folder / "pipe.bin")
            return "pipe.bin"

        def subdir(folder):
            (folder / "dir.bin").mkdir(exist_ok=True)
            return "dir.bin"

        def in_cwd_only(folder, nbytes=nbytes):
            (cwd / "cwd-weights.bin").write_bytes(CANARY * (nbytes // len(CANARY) + 1))
            return "cwd-weights.bin"

        variants = {
            "dotdot": (lambda f: "../outside.bin", "outside the model's folder"),
            "deep-dotdot": (lambda f: "a/../../outside.bin", "outside the model's folder"),
            "absolute": (lambda f: str(outside), "outside the model's folder"),
            "etc-passwd": (lambda f: "/etc/passwd", "outside the model's folder"),
            "symlink-out": (sym(outside), "outside the model's folder"),
            "symlink-dev-zero": (sym("/dev/zero"), "outside the model's folder"),
            "fifo": (fifo, "named pipe"),
            "directory": (subdir, "directory"),
            "cwd-name": (in_cwd_only, "does not exist"),
            "empty-location": (lambda f: "", "no valid location"),
        }
        for kind, (place, needle) in variants.items():
            yield f"external-{kind}@{name}", place, None, None, (label, needle)
        yield f"external-offset-past-end@{name}", lambda f: "w.bin", 1 << 20, None, (label, "not inside the file")
        yield f"external-length-wrong@{name}", lambda f: "w.bin", 0, nbytes + 4, (label, "length")
        yield f"external-offset-text@{name}", lambda f: "w.bin", "ten", None, (label, "whole number")
        yield f"external-negative-offset@{name}", lambda f: "w.bin", -4, None, (label, "not inside the file")


# ---------------------------------------------------------------- the whole set


def write(model, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def hostile_onnx(root: Path, cwd: Path, seed: int = 30) -> list[OnnxCase]:
    """At least 150 cases, each a file under its own folder in `root` (so a folder is the
    model's own), plus the file-level ones."""
    rng = random.Random(seed)
    cases: list[OnnxCase] = []
    root.mkdir(parents=True, exist_ok=True)
    (root / "outside.bin").write_bytes(CANARY * 64)

    def folder_for(label):
        d = root / f"case{len(cases):03d}"
        d.mkdir()
        return d

    for label, apply, needles in (*attribute_faults(rng), *tensor_faults(rng), *graph_faults(rng)):
        model = base_model(rng)
        apply(model)
        path = write(model, folder_for(label) / "model.onnx")
        cases.append(OnnxCase(label, path, (str(path), *needles)))
    for label, place, offset, length, needles in external_faults(root, cwd):
        model = base_model(rng)
        folder = folder_for(label)
        name = label.split("@")[1]
        good = numpy_helper.to_array(tensor(model, name)).tobytes()
        (folder / "w.bin").write_bytes(good)
        _external(name, place(folder), offset, length)(model, folder)
        path = write(model, folder / "model.onnx")
        cases.append(OnnxCase(label, path, (str(path), *needles)))
    cases += file_faults(root, rng)
    return cases


def file_faults(root: Path, rng) -> list[OnnxCase]:
    d = root / "files"
    d.mkdir()
    good = base_model(rng).SerializeToString()
    out = []
    fifo = d / "pipe.onnx"
    os.mkfifo(fifo)
    out.append(OnnxCase("fifo", fifo, (str(fifo), "named pipe")))
    out.append(OnnxCase("dev-zero", Path("/dev/zero"), ("/dev/zero", "character device")))
    big = d / "big.onnx"
    with open(big, "wb") as f:
        f.truncate(5 << 29)  # 2.5 GB, sparse: refused by its size before a byte is read
    out.append(OnnxCase("2.5GB", big, (str(big), "2684354560 bytes")))
    (d / "folder.onnx").mkdir()
    out.append(OnnxCase("directory", d / "folder.onnx", ("folder.onnx", "directory")))
    loop = d / "loop.onnx"
    loop.symlink_to(loop)
    out.append(OnnxCase("symlink-loop", loop, ("loop.onnx", "symlink loop")))
    out.append(OnnxCase("missing", d / "missing.onnx", ("missing.onnx", "does not exist")))
    empty = d / "empty.onnx"
    empty.write_bytes(b"")
    out.append(OnnxCase("empty", empty, ("empty.onnx",)))
    for i in range(6):
        noise = d / f"noise{i}.onnx"
        noise.write_bytes(rng.randbytes(rng.randint(1, 4096)))
        out.append(OnnxCase(f"noise{i}", noise, (noise.name,)))
    for i in range(8):
        cut = d / f"cut{i}.onnx"
        cut.write_bytes(good[: rng.randrange(1, len(good))])
        out.append(OnnxCase(f"truncated{i}", cut, (cut.name,)))
    return out
