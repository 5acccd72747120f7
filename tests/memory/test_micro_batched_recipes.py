"""The float and emulated recipes under micro-batching (memory/fit.py): their quantizers take
the whole tensor's range, so they run whole (rows "coupled"), and the products run on row
slices of the quantized operands (an emulated recipe's Scaled keeps its one scale:
execute/slices.row_slice). A micro-batched step spills nothing and ends within float
rounding of the plain step: the weight gradients' float32 partial sums are added slice by
slice (NITI's integer sums are bit-exact: tests/e2e/test_memory_train.py). Before, the
first quantizer's Scaled result reached the arena as an object array and the step failed."""

import dataclasses

import dsptrain
import numpy as np
import pytest
from dsptrain.config import MemoryConfig
from dsptrain.data import synthetic

BATCH, MICRO = 16, 4


def _step(name, memory, tmp_path):
    run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / f"lenet-fmnist-{name}.yaml")
    trainer = dsptrain.Trainer(dataclasses.replace(run, memory=memory), backend="ref", out_dir=tmp_path, progress=False)
    data = synthetic("train", (28, 28, 1), count=BATCH)
    stats = trainer.step(data.images, data.labels)
    state = {k: np.asarray(getattr(v, "q", v), np.float64) for k, v in trainer.state.items()}
    trainer.close()
    return stats, state


@pytest.mark.parametrize("name", ["octo", "afp", "mls", "fp8", "wageubn", "fp32"])
def test_a_micro_batched_step_matches_the_plain_step_within_float_rounding(name, tmp_path):
    _, plain = _step(name, MemoryConfig(), tmp_path / "plain")
    stats, sliced = _step(name, MemoryConfig(arena=True, micro_batch=MICRO), tmp_path / "sliced")
    assert stats.micro_batch == MICRO and stats.spilled_bytes == 0, (stats.memory_plan, stats.spilled_bytes)
    assert plain.keys() == sliced.keys()
    for k in plain:
        scale = max(float(np.max(np.abs(plain[k]))), 1e-30)
        # float32 rounding; where the grid is coarser a few of its steps: FP8's float16 weights
        # and momentum, whose gradients are FP16-chunked sums taken slice by slice (measured
        # 5 steps of 2**-12 on a momentum of 0.3), WAGEUBN's integer accumulator (a few units)
        bound = {"fp8": 2.0**-7 * scale, "wageubn": 4.0}.get(name, 1e-4 * scale)
        assert np.max(np.abs(plain[k] - sliced[k])) <= bound, (name, k, np.max(np.abs(plain[k] - sliced[k])), bound)
