"""The emulated recipes in the memory arena: their quantized operands (algorithms/_quant.Scaled:
int8 or int16 elements with a scale, FP8 grid values) take the arena slots the plan sized
for them (nothing spilled) and a step in the arena ends with the same weights as a plain
step (LeNet-5, synthetic batches, the reference backend)."""

import dataclasses

import dsptrain
import numpy as np
import pytest
from dsptrain.config import MemoryConfig
from dsptrain.data import synthetic

BATCH = 16


def _two_steps(name, memory, tmp_path):
    run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / f"lenet-fmnist-{name}.yaml")
    trainer = dsptrain.Trainer(dataclasses.replace(run, memory=memory), backend="ref", out_dir=tmp_path, progress=False)
    data = synthetic("train", (28, 28, 1), count=BATCH)
    stats = [trainer.step(data.images, data.labels) for _ in range(2)]
    state = {k: np.array(getattr(v, "q", v)) for k, v in trainer.state.items()}
    trainer.close()
    return stats, state


@pytest.mark.parametrize("name", ["octo", "afp", "mls", "fp8"])
def test_an_emulated_step_in_the_arena_spills_nothing_and_matches_the_plain_step(name, tmp_path):
    plain_stats, plain = _two_steps(name, MemoryConfig(), tmp_path / "plain")
    stats, arena = _two_steps(name, MemoryConfig(arena=True), tmp_path / "arena")
    assert all(s.memory_plan and s.spilled_bytes == 0 for s in stats), [(s.memory_plan, s.spilled_bytes) for s in stats]
    assert all(s.arena_high_water_bytes <= s.arena_bytes for s in stats)
    assert plain.keys() == arena.keys()
    assert all(np.array_equal(plain[k], arena[k]) for k in plain), [
        k for k in plain if not np.array_equal(plain[k], arena[k])
    ]
