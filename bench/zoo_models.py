"""The benches' models by name: dsptrain's zoo (runtime/models.py: lenet5, vgg11, ...) or
torchvision's mobile CNNs restated in tests/zoo_torch/ (mobilenet_v2, ...), imported
through dsptrain.from_torch at full size with random weights (torch needed only for those)."""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def torch_zoo_names() -> set[str]:
    """Names tests/zoo_torch/ defines (empty without torch)."""
    try:
        from zoo_torch import ZOO
    except ImportError:
        return set()
    return set(ZOO)


def zoo_model(name: str, num_classes: int = 10):
    """A dsptrain Model for a torch-zoo `name` (a fresh import each call: every trainer its
    own weights), or None for a name of dsptrain's own zoo (the run's `model: {name}`)."""
    from dsptrain.models import MODELS

    if name in MODELS:
        return None
    import dsptrain
    import torch
    from zoo_torch import build

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dsptrain.from_torch(build(name, num_classes, full=True), torch.zeros(2, 3, 32, 32))
