"""Does an exported file compute what dsptrain computes? (interchange/ writes the files;
this room sits above train/ because it evaluates a checkpoint with a Trainer.) The checkpoint's own evaluation
(the recipe's forward on a backend, as `Trainer.predict`) beside ONNX Runtime's run of
the exported file, on the same images: top-1 agreement and the largest logit difference."""

from __future__ import annotations

import dataclasses

import numpy as np

from .errors import UserError


def dsptrain_logits(checkpoint, images: np.ndarray, backend: str = "cpu", batch: int = 500) -> np.ndarray:
    """Logits of the checkpoint's model under its recipe, on uint8 NHWC images."""
    from .config import ModelConfig, RunConfig, load_recipe
    from .config.settings import recipe_from_settings
    from .interchange import read_checkpoint
    from .train import Trainer

    trained = read_checkpoint(checkpoint)
    # the settings it was trained with (an older checkpoint, without them: the recipe's defaults)
    recipe = (
        load_recipe(trained.recipe)
        if trained.settings is None
        else recipe_from_settings(trained.settings, trained.path)
    )
    run = RunConfig(
        name=f"{trained.model.name}-check",
        recipe=recipe,
        model=ModelConfig(),
        backend=backend,
        energy="estimate",
    )
    trainer = Trainer(
        run, progress=False, model=dataclasses.replace(trained.model, initial_weights=None), out_dir=trained.path.parent
    )
    try:
        trainer.state = {name: trained.state[name] for name in trainer.state}
        return np.concatenate([trainer.predict(images[i : i + batch]) for i in range(0, len(images), batch)])
    finally:
        trainer.close()


def onnxruntime_logits(onnx_path, images: np.ndarray, batch: int | None = None) -> np.ndarray:
    """Logits ONNX Runtime computes from the file, fed (pixel - 128) / 128 in NCHW, in
    batches of `batch` (all at once when None; an onnx-niti file needs dsptrain's batches)."""
    try:
        import onnxruntime
    except ImportError:
        raise UserError("checking an export needs onnxruntime (pip install onnxruntime)") from None
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    x = np.ascontiguousarray(((images.astype(np.float32) - 128.0) / 128.0).transpose(0, 3, 1, 2))
    step = batch or len(x)
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[i : i + step]})[0] for i in range(0, len(x), step)])


def agreement(reference: np.ndarray, other: np.ndarray) -> dict:
    """Share of samples with the same top-1 class, and the largest |logit difference|."""
    same = reference.argmax(axis=1) == other.argmax(axis=1)
    return {
        "samples": int(len(same)),
        "top1_agreement": float(same.mean()),
        "max_logit_diff": float(np.max(np.abs(reference - other))),
        "logit_scale": float(np.max(np.abs(reference))),
    }
