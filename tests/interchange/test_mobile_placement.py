"""MobileNetV2 (tests/zoo_torch/, reduced) lowered by NITI and placed by a device profile
with measured per-product speeds (`hook_speeds`): its depthwise ops go to the processor the
measurements say is faster, its pointwise and dense products stay; the lowering's MAC
counts are the ones `dsptrain calibrate` measures rates in."""

from __future__ import annotations

import warnings

import dsptrain
import numpy as np
import pytest
from dsptrain.config import load_device, load_recipe
from dsptrain.graph import lower
from dsptrain.plan import place
from dsptrain.plan.rates import rate_key

from .helpers import need_torch, write_run

BATCH = 16
STEPS_SPLIT = 5  # adaptive rescaling gives requantized products a shift after the first steps: then they split


class _Backend:
    def __init__(self, name):
        self.name = name

    def supports(self, op):
        return True, f"test {self.name}"


@pytest.fixture(scope="module")
def graph():
    torch = need_torch()
    from tests.zoo_torch import build

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dsptrain.from_torch(build("mobilenet_v2"), torch.zeros(2, 3, 32, 32))
    return lower(model, load_recipe("niti"), BATCH, True)


def _profile(tmp_path, dw_macs_per_cycle: float):
    path = tmp_path / f"dw{dw_macs_per_cycle:g}.yaml"
    dsp = {k: 500.0 for k in ("conv2d_s8", "conv2d_bwd_data_s8", "conv2d_bwd_weight_s8", "gemm_s8")}
    dsp.update({k: dw_macs_per_cycle for k in ("dwconv2d_s8", "dwconv2d_bwd_data_s8", "dwconv2d_bwd_weight_s8")})
    cpu = {k: 1.0e10 for k in dsp}
    path.write_text(
        "name: measured\ndsp: {call_s: 1.0e-4}\ncpu: {call_s: 1.0e-4}\n"
        f"hook_speeds: {{dsp: {dsp}, cpu: {cpu}}}\n".replace("'", "")
    )
    return load_device(str(path))


def _depthwise(graph):
    return [op for op in graph.ops if any(h.startswith("dwconv2d") for h in op.hooks)]


def test_depthwise_ops_follow_their_measured_speed(graph, tmp_path):
    both = {"dsp": _Backend("dsp"), "cpu": _Backend("cpu")}
    dw = _depthwise(graph)
    products = [op for op in graph.ops if rate_key(graph, op) and op not in dw]
    blocks = sum(op.kind == "niti.dwconv_fwd" for op in dw)
    assert blocks >= 3 and len(dw) == 3 * blocks and products  # forward, backward data, weight gradient each
    assert {rate_key(graph, op) for op in dw} == {"dwconv2d_s8", "dwconv2d_bwd_data_s8", "dwconv2d_bwd_weight_s8"}
    assert any(rate_key(graph, op).endswith(".pointwise") for op in products)
    slow = place(graph, both, device=_profile(tmp_path, 0.5), placement="profile")  # 5e8 MAC/s: the CPU wins
    assert {slow.backend_of(op) for op in dw} == {"cpu"}
    assert {slow.backend_of(op) for op in products} == {"dsp"}
    fast = place(graph, both, device=_profile(tmp_path, 200.0), placement="profile")  # 2e11 MAC/s: the DSP wins
    assert {fast.backend_of(op) for op in dw} == {"dsp"}
    assert all("dwconv2d" in fast.placement[op.name].reason for op in dw)


def test_lowered_macs_count_taps_as_calibrate_does(graph):
    for op in _depthwise(graph):
        if op.kind.endswith("fwd"):
            out = graph.tensors[op.outputs[0]].shape
            kh, kw = graph.tensors[op.inputs[1]].shape[1:3]
            assert op.macs == int(np.prod(out)) * kh * kw, op.name  # every tap of every output, padding too


def test_a_step_runs_each_depthwise_op_where_the_profile_placed_it(tmp_path, emulated_dsp_tools):
    """On the emulated DSP with the CPU beside it: a profile measuring the DSP's depthwise
    kernels slow sends them to the CPU and the step runs them there; the weights after the
    step are bit for bit the CPU backend's (NITI is bit-exact across backends)."""
    torch = need_torch()
    from tests.zoo_torch import build

    profile = _profile(tmp_path, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dsptrain.from_torch(build("mobilenet_v2"), torch.zeros(2, 3, 32, 32))
    x = np.random.default_rng(7).integers(0, 256, (8, 32, 32, 3), dtype=np.uint8)
    y = np.arange(8) % 10
    run = dsptrain.load_run(
        write_run(tmp_path, "niti", f"train: {{epochs: 1, batch_size: 8}}\nscheduler: {{device: {profile.source}}}\n")
    )
    weights = {}
    for backend in ("dsp", "cpu"):
        trainer = dsptrain.Trainer(run, backend=backend, model=model, progress=False, out_dir=tmp_path / backend)
        try:
            stats = trainer.step(x, y)
            plan = trainer.plans.get(8, True)
            if backend == "dsp":
                dw = _depthwise(plan.graph)
                assert {plan.backend_of(op) for op in dw} == {"cpu"}
                products = [op for op in plan.graph.ops if rate_key(plan.graph, op) and op not in dw]
                assert {plan.backend_of(op) for op in products} == {"dsp"}
                assert stats.int8_macs.get("cpu", 0) >= sum(op.macs for op in dw) > 0
                assert stats.int8_macs.get("dsp", 0) >= sum(op.macs for op in products) > 0
            weights[backend] = {k: np.array(getattr(v, "q", v)) for k, v in trainer.state.items()}
        finally:
            trainer.close()
    assert weights["dsp"].keys() == weights["cpu"].keys()
    for name in weights["cpu"]:
        assert np.array_equal(weights["dsp"][name], weights["cpu"][name]), name


def test_batch_splitting_takes_depthwise_products_and_stays_bit_exact(tmp_path):
    """A profile whose CPU L2 holds a few rows, calls that cost nothing and products that are
    all memory-bound: splitting chunks depthwise products too, and the weights after the
    steps are the unsplit run's bit for bit."""
    torch = need_torch()
    from dsptrain.plan import splittable

    from tests.zoo_torch import build

    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("name: tiny\ncpu: {l2: 16KiB, call_s: 1.0e-9, macs_per_s: 1.0e+18}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dsptrain.from_torch(build("mobilenet_v2"), torch.zeros(2, 3, 32, 32))
    x = np.random.default_rng(11).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
    y = np.arange(16) % 10
    weights, split = {}, {}
    for label, on in (("split", "true"), ("whole", "false")):
        (tmp_path / label).mkdir()
        run = dsptrain.load_run(
            write_run(
                tmp_path / label,
                "niti",
                f"train: {{epochs: 1, batch_size: 16}}\nscheduler: {{device: {tiny}, batch_split: {on}}}\n",
            )
        )
        trainer = dsptrain.Trainer(run, backend="cpu", model=model, progress=False, out_dir=tmp_path / label / "out")
        try:
            ran = sum(trainer.step(x, y).split_ops for _ in range(STEPS_SPLIT))
            assert (ran > 0) == (label == "split"), (label, ran)
            plan = trainer.plans.get(16, True)
            split[label] = [op for op in plan.graph.ops if splittable(plan.graph, op) and plan.split_rows(op, 16)]
            weights[label] = {k: np.array(getattr(v, "q", v)) for k, v in trainer.state.items()}
        finally:
            trainer.close()
    assert any(op.kind.startswith("niti.dwconv") for op in split["split"]) and not split["whole"]
    for name in weights["whole"]:
        assert np.array_equal(weights["split"][name], weights["whole"][name]), name
