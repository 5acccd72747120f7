"""A PyTorch module as a dsptrain Model, through ONNX (torch.onnx.export, then onnx_import).

torch is optional: imported here only, when `from_torch` is called; nothing on the
training path needs it. The TorchScript-based exporter (`dynamo=False`) is used: it is
still in torch 2.13 and, unlike the torch.export-based default, needs no onnxscript.
`training=PRESERVE` keeps batch norm as its own node (eval export would fold it into
the conv, leaving a conv bias dsptrain's layers cannot hold). `mode="train"` exports the
module in training mode instead (batch norm with its running-statistics outputs, dropout
kept): the import gives the same layers under the same names either way, so a
`train.freeze` list written for one carries over to the other.
"""

from __future__ import annotations

import io
import warnings

from ..errors import UserError

OPSET = 17


EXPORT_MODES = ("eval", "train")


def to_onnx_bytes(module, example_input, mode: str = "eval", opset: int = OPSET) -> bytes:
    """The ONNX file of `module` in eval (or train) mode, input (N, C, H, W) with a dynamic batch."""
    if mode not in EXPORT_MODES:
        raise UserError(f"export mode {mode!r} is not one of {', '.join(EXPORT_MODES)}")
    try:
        import torch
    except ImportError:
        raise UserError("from_torch needs PyTorch (pip install torch); dsptrain itself does not") from None
    was_training = module.training
    module.train(mode == "train")
    training = torch.onnx.TrainingMode.TRAINING if mode == "train" else torch.onnx.TrainingMode.PRESERVE
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the legacy exporter's deprecation notes
            torch.onnx.export(
                module,
                (example_input,),
                buffer,
                dynamo=False,
                opset_version=opset,
                training=training,
                do_constant_folding=mode == "eval",
                input_names=["input"],
                output_names=["logits"],
                dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            )
    finally:
        module.train(was_training)
    return buffer.getvalue()


def from_torch(
    module,
    example_input,
    num_classes: int | None = None,
    bias: str = "fold",
    name: str | None = None,
    mode: str = "eval",
    opset: int = OPSET,
):
    """A dsptrain Model with `module`'s weights, e.g.
    `dsptrain.from_torch(net, torch.zeros(1, 1, 28, 28))`. The input is NCHW as in PyTorch;
    dsptrain feeds it (pixel - 128) / 128, so train the module on that scaling. `mode`:
    the export's mode ("eval" or "train", the same layers); `opset`: its ONNX opset (7-22)."""
    import onnx

    from .model_source import with_head
    from .onnx_import import from_proto

    proto = onnx.load_model_from_string(to_onnx_bytes(module, example_input, mode, opset))
    model, notes = from_proto(proto, f"<torch {type(module).__name__}>", bias, name or type(module).__name__.lower())
    model, note = with_head(model, num_classes)
    for line in notes + ([note] if note else []):
        warnings.warn(f"{model.name}: {line}", UserWarning, stacklevel=2)
    return model
