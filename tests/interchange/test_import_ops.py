"""Each supported ONNX op: a torch module (or an onnx.helper graph) through ONNX into
dsptrain, whose forward must equal torch's: within float tolerance under FP32, and within
NITI_BOUND of the largest logit under NITI (int8 weights and activations, 8-bit rounding
at every integer layer; batch norm and biases as float ops between them)."""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest

from .helpers import dsptrain_logits, images, need_torch, torch_logits

FP32_TOLERANCE = 1e-4  # relative to the largest |logit|
NITI_BOUND = 0.06  # |NITI - torch| <= 6 % of the largest |logit|


def _cases(torch):
    nn = torch.nn

    class Residual(nn.Module):
        """Add (residual, identity and projection shortcut), BN, GlobalAveragePool."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
            self.body = nn.Sequential(
                nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1, bias=False)
            )
            self.down = nn.Sequential(
                nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False),
                nn.ReLU(),
                nn.Conv2d(8, 8, 3, padding=1, bias=False),
            )
            self.short = nn.Conv2d(4, 8, 1, stride=2, bias=False)
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 5, bias=False)

        def forward(self, x):
            x = torch.relu(self.conv(x))
            x = torch.relu(self.body(x) + x)
            x = torch.relu(self.down(x) + self.short(x))
            return self.fc(torch.flatten(self.pool(x), 1))

    class ViewFlatten(nn.Module):
        """x.view(x.size(0), -1): Reshape with its shape from Shape/Gather/Unsqueeze/Concat."""

        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(1, 3, 3, stride=2, bias=False), nn.Linear(3 * 6 * 6, 4, bias=False)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            return self.fc(y.view(y.size(0), -1))

    image = (1, 14, 14)
    return {
        # name: (module, (C, H, W))
        "conv-stride-pad": (
            nn.Sequential(
                nn.Conv2d(1, 4, 3, stride=2, padding=1, bias=False), nn.Flatten(), nn.Linear(4 * 7 * 7, 5, bias=False)
            ),
            image,
        ),
        "conv-bias-folded-into-bn": (
            nn.Sequential(
                nn.Conv2d(1, 4, 3, padding=1, bias=True),
                nn.BatchNorm2d(4),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(4 * 14 * 14, 3, bias=False),
            ),
            image,
        ),
        "gemm-relu-maxpool": (
            nn.Sequential(
                nn.Conv2d(1, 4, 3, bias=False),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(4 * 6 * 6, 16, bias=False),
                nn.ReLU(),
                nn.Linear(16, 5, bias=False),
            ),
            image,
        ),
        "maxpool-3-stride-2": (nn.Sequential(nn.MaxPool2d(3, 2), nn.Flatten(), nn.Linear(36, 4, bias=False)), image),
        # NITI divides a global average by a shift: H*W a power of two
        "averagepool-global": (
            nn.Sequential(
                nn.Conv2d(1, 6, 3, padding=1, bias=False), nn.AvgPool2d(16), nn.Flatten(), nn.Linear(6, 3, bias=False)
            ),
            (1, 16, 16),
        ),
        "globalaveragepool": (
            nn.Sequential(
                nn.Conv2d(1, 6, 3, padding=1, bias=False),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(6, 3, bias=False),
            ),
            (1, 16, 16),
        ),
        "reshape-view": (ViewFlatten(), image),
        "batchnorm": (
            nn.Sequential(
                nn.Conv2d(3, 4, 3, bias=False),
                nn.BatchNorm2d(4),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(4, 3, bias=False),
            ),
            (3, 8, 8),
        ),
        "residual-add": (Residual(), (3, 8, 8)),
    }


def _randomise_bn(torch, net):
    """Running statistics and affine parameters away from their defaults, so BN matters."""
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            with torch.no_grad():
                module.running_mean.uniform_(-0.3, 0.3)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)


CASES = [
    "conv-stride-pad",
    "conv-bias-folded-into-bn",
    "gemm-relu-maxpool",
    "maxpool-3-stride-2",
    "averagepool-global",
    "globalaveragepool",
    "reshape-view",
    "batchnorm",
    "residual-add",
]


@pytest.mark.parametrize("case", CASES)
def test_torch_onnx_dsptrain_forward(case, tmp_path):
    torch = need_torch()
    net, (c, h, w) = _cases(torch)[case]
    _randomise_bn(torch, net)
    model = dsptrain.from_torch(net, torch.zeros(1, c, h, w))
    pixels = images(16, (h, w, c))
    expected = torch_logits(net, pixels)
    scale = np.abs(expected).max()
    fp32 = dsptrain_logits(model, "fp32", pixels, tmp_path)
    assert np.abs(fp32 - expected).max() <= FP32_TOLERANCE * scale, case
    niti = dsptrain_logits(model, "niti", pixels, tmp_path)  # batch norm and biases as float ops
    error = np.abs(niti - expected).max() / scale
    assert error <= NITI_BOUND, f"{case}: NITI off by {error:.3f} of the largest logit"


def _helper_model(onnx, nodes, initializers, input_shape=(1, 1, 4, 4), output="y"):
    helper = onnx.helper
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", *input_shape[1:]])],
        [helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_matmul_add_dropout_identity_constant(tmp_path):
    """MatMul + Add (a bias, dropped on request), Dropout, Identity and Constant, from onnx.helper."""
    import onnx

    rng = np.random.default_rng(1)
    h = onnx.helper
    w1 = rng.normal(0, 0.3, (16, 8)).astype(np.float32)  # (in, out): MatMul's layout
    w2 = rng.normal(0, 0.3, (8, 3)).astype(np.float32)
    bias = np.zeros(8, np.float32)
    nodes = [
        h.make_node("Flatten", ["x"], ["f"], axis=1, name="flat"),
        h.make_node("Constant", [], ["b"], value=onnx.numpy_helper.from_array(bias), name="bias_const"),
        h.make_node("MatMul", ["f", "w1"], ["m"], name="fc1"),
        h.make_node("Add", ["m", "b"], ["a"], name="fc1_bias"),
        h.make_node("Relu", ["a"], ["r"], name="relu"),
        h.make_node("Dropout", ["r"], ["d"], name="drop"),
        h.make_node("Identity", ["d"], ["i"], name="ident"),
        h.make_node("MatMul", ["i", "w2"], ["y"], name="fc2"),
    ]
    path = tmp_path / "mlp.onnx"
    onnx.save(_helper_model(onnx, nodes, {"w1": w1, "w2": w2}), path)
    model = dsptrain.load_model(path)
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds == ["Flatten", "Linear", "ReLU", "Dropout", "Linear"]
    pixels = images(8, (4, 4, 1))
    x = (pixels.astype(np.float64) - 128) / 128
    expected = np.maximum(x.reshape(8, -1) @ w1 + bias, 0) @ w2
    got = dsptrain_logits(model, "fp32", pixels, tmp_path)
    assert np.abs(got - expected).max() <= FP32_TOLERANCE * np.abs(expected).max()


def test_new_head_when_num_classes_differs(tmp_path, capsys):
    torch = need_torch()
    net = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(16, 8, bias=False), torch.nn.ReLU(), torch.nn.Linear(8, 10, bias=False)
    )
    from dsptrain.interchange.torch_bridge import to_onnx_bytes

    path = tmp_path / "mlp.onnx"
    path.write_bytes(to_onnx_bytes(net, torch.zeros(1, 1, 4, 4)))
    model = dsptrain.load_model(path, num_classes=5)
    assert model.num_classes == 5 and model.layers[-1].out_features == 5
    assert "new classifier head '3': 10 -> 5 classes" in capsys.readouterr().err
    assert "3.w" not in model.initial_weights and "1.w" in model.initial_weights
