"""Bad model files end in one `dsptrain: error:` line naming the file (and the node and op
where there is one), exit status 2, no traceback: the CLI in a subprocess, as a user runs it."""

from __future__ import annotations

import numpy as np

from .helpers import cli, cli_start, finish, write_run


def _onnx_file(path, nodes, initializers, inputs=(("x", [None, 1, 4, 4]),), opset=17):
    import onnx

    h = onnx.helper
    graph = h.make_graph(
        nodes,
        "bad",
        [h.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in inputs],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    path.write_bytes(model.SerializeToString())
    return path


def _good_nodes():
    import onnx

    h = onnx.helper
    return [
        h.make_node("Flatten", ["x"], ["f"], axis=1, name="flat"),
        h.make_node("MatMul", ["f", "w"], ["y"], name="fc"),
    ]


W = {"w": np.ones((16, 3), np.float32)}


def _bad_files(tmp_path):
    import onnx

    h = onnx.helper
    good = _onnx_file(tmp_path / "good.onnx", _good_nodes(), W)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    text = tmp_path / "notes.onnx"
    text.write_text("these are my notes, not a model\n" * 20)
    return {
        "truncated": (truncated, ["truncated.onnx", "not an ONNX model"]),
        "not-onnx": (text, ["notes.onnx", "not an ONNX model"]),
        "unsupported-op": (
            _onnx_file(
                tmp_path / "softplus.onnx",
                [
                    h.make_node("Flatten", ["x"], ["f"], axis=1, name="flat"),
                    h.make_node("Softplus", ["f"], ["s"], name="squash"),
                    h.make_node("MatMul", ["s", "w"], ["y"], name="fc"),
                ],
                W,
            ),
            ["softplus.onnx", "node 'squash' (Softplus)", "op type Softplus is not supported; supported: Conv"],
        ),
        "opset-too-new": (
            _onnx_file(tmp_path / "future.onnx", _good_nodes(), W, opset=40),
            ["future.onnx", "opset 40 is not supported (supported: 7..22)"],
        ),
        "initializer-wrong-shape": (
            _onnx_file(tmp_path / "shape.onnx", _good_nodes(), {"w": np.ones((15, 3), np.float32)}),
            ["shape.onnx", "node 'fc' (MatMul)", "'w' has 15 input features, the input has 16"],
        ),
        "two-inputs": (
            _onnx_file(
                tmp_path / "two.onnx", _good_nodes(), W, inputs=(("x", [None, 1, 4, 4]), ("mask", [None, 1, 4, 4]))
            ),
            ["two.onnx", "the graph has 2 inputs ('x', 'mask')"],
        ),
        "avgpool-partial-window": (
            _onnx_file(
                tmp_path / "ceil.onnx",
                [
                    h.make_node(
                        "AveragePool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, name="pool"
                    ),
                    h.make_node("Flatten", ["p"], ["f"], axis=1, name="flat"),
                    h.make_node("MatMul", ["f", "w"], ["y"], name="fc"),
                ],
                {"w": np.ones((1, 3), np.float32)},
            ),
            ["ceil.onnx", "node 'pool' (AveragePool)", "ceil_mode=1 on a 4x4 input", "partial window"],
        ),
        "dynamic-shape": (
            _onnx_file(tmp_path / "dynamic.onnx", _good_nodes(), W, inputs=(("x", [None, 1, "h", 4]),)),
            ["dynamic.onnx", "dynamic H dimension (h)"],
        ),
    }


CASES = [
    "truncated",
    "not-onnx",
    "unsupported-op",
    "opset-too-new",
    "initializer-wrong-shape",
    "two-inputs",
    "dynamic-shape",
    "avgpool-partial-window",
]


def test_bad_model_files_exit_2_with_one_named_line(tmp_path):
    files = _bad_files(tmp_path)
    runs = {case: write_run(tmp_path, "fp32", f"model: {{onnx: {files[case][0]}}}\n", name=case) for case in CASES}
    started = {case: cli_start("plan", runs[case], cwd=tmp_path) for case in CASES}  # in parallel
    for case in CASES:
        expected = files[case][1]
        result = finish(started[case])
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (case, result.stderr)
        assert len(lines) == 1 and lines[0].startswith("dsptrain: error: "), (case, result.stderr)
        assert "Traceback" not in result.stderr
        for fragment in expected:
            assert fragment in lines[0], (case, fragment, lines[0])


def test_good_file_passes_the_same_path(tmp_path):
    path = _onnx_file(tmp_path / "good.onnx", _good_nodes(), W)
    run = write_run(tmp_path, "fp32", f"model: {{onnx: {path}}}\n", name="good")
    result = cli("plan", run, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "good: good on" in result.stdout
