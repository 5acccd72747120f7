"""The planned peak bounds the process: one budgeted training step on the cpu backend, in
a fresh process, raises the peak RSS (VmHWM) above its RSS before the step by no more
than the plan's peak -- arena, op workspace and the kernels' kept scratch
(Backend.scratch_bytes) -- plus a stated tolerance for what no plan counts (Python
objects, allocator rounding). The large arrays the ops make (results before their copy
into the arena, NumPy temporaries) come from the array pool (memory/pool.py), which the
plan's op workspace sizes: none misses it, and a step after the first faults in almost
no pages (before the pool: 0.45M page faults a step of ResNet-18 at batch 80)."""

import json
import subprocess
import sys

import pytest
from dsptrain.backends.ops_cpu import CpuBackend

MB = 1 << 20
TOLERANCE = 0.05  # share of the planned peak
TOLERANCE_BYTES = 4 * MB  # plus this much, whatever the plan
PAGE = 4096
FAULTED_SHARE = 0.1  # a step after the first faults in at most this share of the plan in pages

CHILD = """
import dataclasses, json, resource, sys
import dsptrain
from dsptrain.config import MemoryConfig
from dsptrain.data import synthetic

def status(field):   # /proc/self/status, in bytes
    line = next(l for l in open("/proc/self/status") if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024

model, batch, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
run = dataclasses.replace(run, model=dataclasses.replace(run.model, name=model), memory=MemoryConfig(budget=budget))
trainer = dsptrain.Trainer(run, backend="cpu", progress=False, out_dir=sys.argv[4])
shape = (28, 28, 1) if model == "lenet5" else (32, 32, 3)
data = synthetic("train", shape, count=batch)
trainer.memory_option(trainer.plans.get(batch, True))
try:                 # restart the high-water mark at the RSS now (Linux >= 4.0)
    open("/proc/self/clear_refs", "w").write("5")
except OSError:
    pass
base = status("VmRSS")
for _ in range(2):
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    stats = trainer.step(data.images, data.labels)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults    # the second step's
print(json.dumps({"planned": stats.planned_peak_bytes, "rss": status("VmHWM") - base,
                  "plan": stats.memory_plan, "spilled": stats.spilled_bytes, "faults": faults,
                  "pool": dsptrain.memory.pool.stats()}))
"""

pytestmark = [
    pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status"),
]


@pytest.mark.parametrize(
    "model, batch, budget_mb", [("lenet5", 256, 8), ("vgg_small", 64, 80), ("resnet18_nobn", 48, 64)]
)
def test_planned_peak_bounds_rss_increase(model, batch, budget_mb, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, model, str(batch), str(budget_mb * MB), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["planned"] <= budget_mb * MB and out["spilled"] == 0, out
    bound = out["planned"] * (1 + TOLERANCE) + TOLERANCE_BYTES
    assert out["rss"] <= bound, (
        f"{model} batch {batch} at {budget_mb} MB ({out['plan']}): peak RSS rose "
        f"{out['rss'] / MB:.1f} MB, planned {out['planned'] / MB:.1f} MB, "
        f"bound {bound / MB:.1f} MB"
    )
    assert out["pool"]["missed"] == 0, f"{model}: arrays the plan's op workspace did not count: {out['pool']}"
    faulted = out["faults"] * PAGE
    assert faulted <= FAULTED_SHARE * out["planned"], (
        f"{model} batch {batch} at {budget_mb} MB: the second step faulted in {faulted / MB:.1f} MB of pages, "
        f"more than {FAULTED_SHARE:.0%} of the planned {out['planned'] / MB:.1f} MB"
    )
