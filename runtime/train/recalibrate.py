"""Batch-norm recalibration before an evaluation (`train.bn_recalibration: N`).

A batch norm evaluates with running averages of its batch statistics, which lag the weights:
each average mixes statistics of weights several steps old (momentum 0.1: the last ~10
steps). Where the weights move fast, as NITI's integer update moves an int8 weight by up to
2**mu - 1 steps of its grid each batch, the lag makes the evaluated network another network
than the trained one (NITI's MobileNetV2 on Fashion-MNIST-32: test accuracy swinging by
6 points between epochs). Re-estimating the statistics of the final weights over a few
training batches, with no weight update, is the standard remedy for quantized networks
(Jacob et al., "Quantization and Training of Neural Networks for Efficient Integer-
Arithmetic-Only Inference", CVPR 2018, sec. 3.2; Nagel et al., "A White Paper on Neural
Network Quantization", 2021, sec. 4.3: "BN re-estimation").

Here the training graph's forward ops run over N batches of un-augmented training images in
a fixed order (so a resumed run recalibrates the same way); each batch norm updates its
running mean and variance by its own momentum, as in training, and nothing else changes.
"""

from __future__ import annotations

from .. import data as datasets
from ..nn import BatchNorm2d


def recalibrates(model, frozen, batches: int) -> bool:
    """Whether `batches` > 0 and `model` has a batch norm that is not frozen (a frozen one
    keeps its statistics)."""
    return batches > 0 and any(isinstance(layer, BatchNorm2d) and layer.name not in frozen for layer in model.layers)


def recalibrate(steps, state: dict, train_data, batch_size: int, batches: int, step: int, epoch: int, seed: int):
    """`state` with the batch norms' running statistics re-estimated over `batches` training
    batches (fewer if the data has fewer), in the order of seed `seed + 1`, epoch `epoch`."""
    order = datasets.batches(train_data, batch_size, seed=seed + 1, epoch=epoch)
    for _, (images, _labels) in zip(range(batches), order):
        state = steps.forward_statistics(state, images, step, epoch, seed)
    return state
