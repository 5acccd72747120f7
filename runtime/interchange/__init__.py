"""Models in and out of dsptrain: ONNX import, PyTorch modules, YAML layer lists, and
export of trained checkpoints to ONNX (float or QDQ) and a documented npz.

    model = dsptrain.load_model("pretrained.onnx", num_classes=5)
    model = dsptrain.from_torch(torch_module, torch.zeros(1, 1, 28, 28))
    trainer = dsptrain.Trainer(run, model=model)
    dsptrain.export("runs/finetune/checkpoint.npz", "model.onnx", format="onnx")

One file per job: onnx_import.py (file -> Model), torch_bridge.py (module -> file),
layer_spec.py (YAML layers <-> Model), model_source.py (a run's model section),
weights.py (float weights -> a recipe's state), checkpoint_model.py (checkpoint ->
Model and weights), onnx_export.py (+ onnx_niti.py), npz_export.py. Checking an export
against dsptrain's own evaluation is `runtime/agreement.py` (it needs the Trainer).
"""

from __future__ import annotations

from pathlib import Path

from .checkpoint_model import read_checkpoint
from .layer_spec import describe as describe_model
from .model_source import check_section, frozen_layers, load_model, with_head
from .model_source import resolve as resolve_model
from .torch_bridge import from_torch
from .weights import starting_state

FORMATS = ("onnx", "onnx-qdq", "onnx-niti", "npz")


def export(checkpoint, out, format: str = "onnx") -> str:
    """Write the model of `checkpoint` (a checkpoint.npz or the run directory holding one)
    to `out` as `format` (onnx | onnx-qdq | onnx-niti | npz); returns a one-line summary."""
    from ..errors import UserError
    from ..inputs.outputs import check_output, write_error
    from .checkpoint_model import CHECKPOINT_NAME

    if format not in FORMATS:
        raise UserError(f"export format {format!r} is not one of {', '.join(FORMATS)}")
    source = Path(checkpoint)
    out = check_output(out, f"{format} export", reads=(source, source / CHECKPOINT_NAME))
    trained = read_checkpoint(checkpoint)
    if format != "npz":  # npz holds the arrays as they are; an ONNX graph computes with the settings
        from .recipe_settings import check_export_settings

        check_export_settings(trained)
    try:
        if format == "npz":
            from .npz_export import write_npz

            return write_npz(trained, out)
        from .onnx_export import write_onnx

        # onnx and onnx-qdq carry NITI's activation rounding for a NITI checkpoint; onnx-niti insists on it
        return write_onnx(trained, out, qdq=format == "onnx-qdq", niti=True if format == "onnx-niti" else None)
    except OSError as exc:  # the folder vanished, filled up or turned read-only after the checks
        raise write_error(out, exc) from None


__all__ = [
    "load_model",
    "from_torch",
    "export",
    "FORMATS",
    "read_checkpoint",
    "describe_model",
    "check_section",
    "frozen_layers",
    "resolve_model",
    "with_head",
    "starting_state",
]
