"""Kernel scratch follows a budget that shrinks: when the trainer adopts a plan that keeps
the cpu kernels' scratch smaller than an earlier plan grew it, the backend releases it
(Backend.release_scratch, cpu_ops/scratch.h), and the process's resident memory falls
with it. Run in a fresh process on the cpu backend (RSS is per process)."""

import json
import subprocess
import sys

import pytest
from dsptrain.algorithms import niti
from dsptrain.backends.base import Backend
from dsptrain.backends.ops_cpu import CpuBackend
from dsptrain.memory.fit import Option
from dsptrain.plan import Planner

MB = 1 << 20

CHILD = """
import dataclasses, json, sys
import dsptrain
from dsptrain.config import MemoryConfig
from dsptrain.data import synthetic

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

batch, out_dir = int(sys.argv[1]), sys.argv[2]
run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
run = dataclasses.replace(run, model=dataclasses.replace(run.model, name="vgg_small"))
probe = dsptrain.Trainer(run, backend="cpu", progress=False, out_dir=out_dir)
fitter = probe.plans.get(batch, True).fitter()
roomy, tight = fitter.options[0], fitter.smallest()
probe.close()
schedule = {0: roomy.peak, 2: tight.peak}
trainer = dsptrain.Trainer(dataclasses.replace(run, memory=MemoryConfig(budget=schedule)), backend="cpu",
                           progress=False, out_dir=out_dir)
cpu = trainer.backends["cpu"]
released = []
native_release = cpu.release_scratch
def counted():
    released.append(native_release())
    return released[-1]
cpu.release_scratch = counted
data = synthetic("train", (32, 32, 3), count=batch)
after = []
for step in range(4):
    stats = trainer.step(data.images, data.labels)
    after.append({"rss": rss(), "plan": stats.memory_plan, "scratch": stats.planned_peak_bytes})
print(json.dumps({"after": after, "released": released, "roomy_scratch": roomy.scratch,
                  "tight_scratch": tight.scratch, "roomy_arena": roomy.memory.arena_bytes,
                  "tight_arena": tight.memory.arena_bytes}))
"""


class _Recorder(Backend):
    def __init__(self):
        self.calls = 0

    def release_scratch(self):
        self.calls += 1
        return 0


def _option(**buffers):
    return Option(
        memory=None,
        micro_batch=1,
        peak=0,
        cost=0.0,
        scratch=sum(buffers.values()),
        scratch_buffers=tuple(sorted(buffers.items())),
    )


def test_scratch_is_released_only_when_a_plan_keeps_some_buffer_smaller():
    backend = _Recorder()
    planner = Planner("ref", niti)
    planner.backends = {"recorder": backend}
    held = planner.adopt_scratch({}, _option(a=10, b=5))
    assert held == {"a": 10, "b": 5} and backend.calls == 0
    held = planner.adopt_scratch(held, _option(a=20, b=5, c=1))  # everything grows: keep
    assert held == {"a": 20, "b": 5, "c": 1} and backend.calls == 0
    held = planner.adopt_scratch(held, _option(a=20, b=9))  # c no longer planned: release
    assert held == {"a": 20, "b": 9} and backend.calls == 1
    held = planner.adopt_scratch(held, _option(a=4, b=50))  # a smaller, total larger: release
    assert held == {"a": 4, "b": 50} and backend.calls == 2
    assert Backend().release_scratch() == 0  # the hook is optional


@pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_shrinking_budget_releases_kernel_scratch_and_rss_falls(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "64", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    after, released = out["after"], out["released"]
    assert after[0]["plan"] == after[1]["plan"] != after[2]["plan"] == after[3]["plan"]
    assert out["tight_scratch"] < out["roomy_scratch"]
    assert len(released) == 1, released  # once, when the tight plan was adopted
    # what was freed is at least what the roomy plan planned beyond the tight one
    assert released[0] >= out["roomy_scratch"] - out["tight_scratch"] > 0
    # and the process shrank by most of it (the arena shrank too; the rest is allocator slack)
    fell = after[1]["rss"] - after[3]["rss"]
    expected = out["roomy_scratch"] - out["tight_scratch"] + out["roomy_arena"] - out["tight_arena"]
    assert fell >= 0.8 * expected, (
        f"RSS fell {fell / MB:.1f} MB after the shrink; the plans differ by {expected / MB:.1f} MB of scratch and arena"
    )


def test_evaluation_under_a_budget_gives_its_scratch_back(tmp_path):
    """The evaluation batch is outside the memory plan: under a budget, the scratch it grew
    is released before training goes on (and without a budget nothing is released)."""
    import dataclasses

    import dsptrain
    from dsptrain.config import MemoryConfig
    from dsptrain.data import synthetic

    run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
    test = synthetic("test", (28, 28, 1), count=16)
    for budget, expected_calls in ((None, 0), ("64MB", 1)):
        trainer = dsptrain.Trainer(
            dataclasses.replace(run, memory=MemoryConfig(budget=budget)),
            backend="ref",
            progress=False,
            out_dir=tmp_path,
        )
        recorder = _Recorder()
        trainer.backends = {"ref": trainer.backends["ref"], "recorder": recorder}
        trainer._held_scratch = {"gemm.packed_b": 1}
        trainer.evaluate(test)
        assert recorder.calls == expected_calls
        assert trainer._held_scratch == ({} if budget else {"gemm.packed_b": 1})
        trainer.close()
