"""Per-product speeds in the device profile (`hook_speeds`, written by `dsptrain calibrate`):
the profile key and its checks, the rate each op takes, and placement that sends a
depthwise layer where its measured speed says it is fastest, with the batch-splitting and
co-scheduling cost model reading the same rates (no native code)."""

import pytest
from dsptrain.calibrate import speeds_block, with_speeds_block, write_profile
from dsptrain.cli import main
from dsptrain.config import ConfigError, HookSpeeds, load_device, load_recipe
from dsptrain.cost import RATE_KEYS, micro_batch_count, speeds, split_net_seconds
from dsptrain.graph import GraphBuilder, TrainGraph, lower
from dsptrain.models import build_model
from dsptrain.plan import place
from dsptrain.plan.rates import op_time, rate_key

PRODUCT = ("absmax", "shift_round")  # what NITI's requantized products name beside their product hook


class _Backend:
    """Takes every op but those whose hooks include one of `lacks`."""

    def __init__(self, name, lacks=()):
        self.name, self.lacks = name, lacks

    def supports(self, op):
        if any(h in self.lacks for h in op.hooks):
            return False, "test: lacks a hook"
        return True, f"test {self.name}"


def _both():
    return {"dsp": _Backend("dsp", lacks=("niti_loss_grad_s8",)), "cpu": _Backend("cpu")}


def inverted_residual(batch=16, hw=8, c=16, expand=6) -> TrainGraph:
    """MobileNetV2's block as NITI would lower it (each product's hook, MACs counting every
    tap): pointwise expansion, 3 x 3 depthwise, pointwise projection; forward, backward data
    and weight gradient of each, in the order a step runs them."""
    b = GraphBuilder(load_recipe("niti"), batch)
    e = c * expand
    x = b.tensor("x", (batch, hw, hw, c), "int8", "input")
    layers = [("expand", c, e, 1, "conv2d"), ("dw", e, e, 3, "dwconv2d"), ("project", e, c, 1, "conv2d")]
    for name, cin, cout, k, hook in layers:
        w = b.param(f"{name}.w", (cout, k, k, 1 if hook == "dwconv2d" else cin), "int8")
        out = b.tensor(f"{name}.out", (batch, hw, hw, cout), "int8", "activation")
        macs = batch * hw * hw * cout * k * k * (1 if hook == "dwconv2d" else cin)
        b.op(
            f"{name}.fwd",
            "niti.conv_fwd",
            name,
            "forward",
            (x, w),
            (out,),
            (f"{hook}_s8", *PRODUCT),
            macs,
            stride=1,
            pad=k // 2,
        )
        b.layer_io[name] = (x, out)
        x = out
    err = b.tensor("err.project", (batch, hw, hw, c), "int8", "error")
    for name, _, _, k, hook in reversed(layers):
        x_in, _ = b.layer_io[name]
        macs = b.find(f"{name}.fwd").macs
        grad = b.tensor(f"{name}.grad", b.tensors[f"{name}.w"].shape, "int32", "grad")
        b.op(
            f"{name}.bwd_weight",
            "niti.conv_bwd_weight",
            name,
            "backward",
            (err, x_in),
            (grad,),
            (f"{hook}_bwd_weight_s8",),
            macs,
            stride=1,
            pad=k // 2,
            kernel=(k, k),
        )
        err_in = b.tensor(f"err.{name}", b.tensors[x_in].shape, "int8", "error")
        b.op(
            f"{name}.bwd_data",
            "niti.conv_bwd_data",
            name,
            "backward",
            (err, f"{name}.w"),
            (err_in,),
            (f"{hook}_bwd_data_s8", *PRODUCT),
            macs,
            stride=1,
            pad=k // 2,
            in_hw=(hw, hw),
        )
        b.op(f"{name}.update", "niti.update", name, "update", (f"{name}.w", grad), (f"{name}.w",), ("niti_update_s8",))
        err = err_in
    return TrainGraph("niti", batch, b.ops, b.tensors, b.params, "project.out", takes_given_shift=True)


def _profile(tmp_path, text, name="p"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\n{text}")
    return load_device(str(path))


# both processors measured, a call costing the same on each (as v66.yaml has it): the DSP's
# dense and pointwise products far ahead of the CPU's,
# its depthwise kernels at `dw` MACs a cycle (at `clock`), the CPU's at 1e10 MAC/s
MEASURED = """dsp: {{clock_hz: {clock}, call_s: 1.0e-4}}
cpu: {{call_s: 1.0e-4}}
hook_speeds:
  cpu: {{dwconv2d_s8: 1.0e+10, dwconv2d_bwd_data_s8: 1.0e+10, dwconv2d_bwd_weight_s8: 1.0e+10,
        conv2d_s8: 2.0e+10, conv2d_bwd_data_s8: 2.0e+10, conv2d_bwd_weight_s8: 2.0e+10}}
  dsp: {{dwconv2d_s8: {dw}, dwconv2d_bwd_data_s8: {dw}, dwconv2d_bwd_weight_s8: {dw},
        conv2d_s8: 500.0, conv2d_bwd_data_s8: 500.0, conv2d_bwd_weight_s8: 500.0}}
"""


def _where(plan, graph, layer):
    return {op.name: plan.backend_of(op) for op in graph.ops if op.layer == layer and op.phase != "update"}


def test_rate_keys_name_the_product_and_pointwise():
    graph = inverted_residual()
    keys = {op.name: rate_key(graph, op) for op in graph.ops}
    assert keys["expand.fwd"] == "conv2d_s8.pointwise" and keys["project.bwd_data"] == "conv2d_bwd_data_s8.pointwise"
    assert keys["project.bwd_weight"] == "conv2d_bwd_weight_s8.pointwise"
    assert keys["dw.fwd"] == "dwconv2d_s8" and keys["dw.bwd_weight"] == "dwconv2d_bwd_weight_s8"
    assert keys["dw.update"] is None
    lenet = lower(build_model("lenet5", 10), load_recipe("niti"), 8, True)
    keys = {op.name: rate_key(lenet, op) for op in lenet.ops}
    assert keys["conv1.fwd"] == "conv2d_s8" and keys["conv2.bwd_data"] == "conv2d_bwd_data_s8"
    assert keys["fc1.fwd"] == "gemm_s8" and keys["fc1.bwd_weight"] == "gemm_s8" and keys["relu1.fwd"] is None
    assert set(keys.values()) - {None} <= set(RATE_KEYS)


def test_a_depthwise_layer_goes_where_its_measured_speed_is_higher(tmp_path):
    graph = inverted_residual()
    # the DSP's depthwise kernels at 2 MACs a cycle (2e9 MAC/s): the CPU's 1e10 wins them
    slow_dw = _profile(tmp_path, MEASURED.format(clock="1.0e+9", dw="2.0"), "slow")
    plan = place(graph, _both(), device=slow_dw, placement="profile")
    assert set(_where(plan, graph, "dw").values()) == {"cpu"}
    for layer in ("expand", "project"):  # the pointwise products stay on the DSP
        assert set(_where(plan, graph, layer).values()) == {"dsp"}
    declined = dict(plan.placement["dw.fwd"].declined)["dsp"]
    assert "dwconv2d_s8 measured" in declined and "faster on the CPU" in declined
    # measured at 200 MACs a cycle (2e11 MAC/s) the same layer stays on the DSP, and says why
    fast_dw = _profile(tmp_path, MEASURED.format(clock="1.0e+9", dw="200.0"), "fast")
    plan = place(graph, _both(), device=fast_dw, placement="profile")
    assert set(_where(plan, graph, "dw").values()) == {"dsp"}
    assert "dwconv2d_s8 measured" in plan.placement["dw.fwd"].reason
    # the same MACs a cycle at a slower DSP clock: the modeled time crosses the CPU's
    crossing = op_time(fast_dw, graph, graph.op("dw.fwd"), "cpu").seconds
    slower = _profile(tmp_path, MEASURED.format(clock="1.0e+7", dw="200.0"), "slower")
    assert op_time(slower, graph, graph.op("dw.fwd"), "dsp").seconds > crossing
    plan = place(graph, _both(), device=slower, placement="profile")
    assert plan.backend_of(graph.op("dw.fwd")) == "cpu"
    # placement: first ignores the speeds
    plan = place(graph, _both(), device=slow_dw, placement="first")
    assert {plan.backend_of(op) for op in graph.ops if op.phase != "update"} == {"dsp"}


def test_profiles_without_measured_speeds_keep_todays_placement(tmp_path):
    graph = inverted_residual()
    plain = _profile(tmp_path, "dsp: {macs_per_s: 1.0e+3}\ncpu: {macs_per_s: 1.0e+15}\n", "plain")
    assert plain.hook_speeds == HookSpeeds()
    plan = place(graph, _both(), device=plain, placement="profile")
    assert {plan.backend_of(op) for op in graph.ops} == {"dsp"}
    # measured on the CPU alone: no comparison is made, the DSP keeps what it takes
    one_side = _profile(tmp_path, "hook_speeds: {cpu: {dwconv2d_s8: 1.0e+15}}\n", "one")
    plan = place(graph, _both(), device=one_side, placement="profile")
    assert plan.backend_of(graph.op("dw.fwd")) == "dsp"
    # and the cost model reads the generic rates
    assert speeds(plain, "dsp").rate("dwconv2d_s8") == (1.0e3, "macs_per_s")


def test_rates_fall_back_from_pointwise_to_the_hook_to_the_processor(tmp_path):
    profile = _profile(
        tmp_path,
        "dsp: {clock_hz: 5.0e+8, macs_per_s: 7.0e+9}\n"
        "hook_speeds: {dsp: {conv2d_s8: 100.0, conv2d_s8.pointwise: 40.0}}\n",
    )
    dsp = speeds(profile, "dsp")
    assert dsp.rate("conv2d_s8.pointwise") == (40.0 * 5e8, "measured conv2d_s8.pointwise")
    assert dsp.rate("conv2d_s8") == (100.0 * 5e8, "measured conv2d_s8")
    assert dsp.rate("conv2d_bwd_data_s8.pointwise") == (7.0e9, "macs_per_s")
    assert dsp.rate(None) == (7.0e9, "macs_per_s")
    only_hook = _profile(tmp_path, "hook_speeds: {cpu: {conv2d_s8: 3.0e+9}}\n", "hook")
    assert speeds(only_hook, "cpu").rate("conv2d_s8.pointwise") == (3.0e9, "measured conv2d_s8")


def test_co_scheduling_and_splitting_read_the_measured_rates(tmp_path):
    graph = inverted_residual(batch=64)
    base = "dsp: {call_s: 1.0e-9, macs_per_s: 1.0e+12}\ncpu: {call_s: 1.0e-9, macs_per_s: 1.0e+12, l2: 64KiB}\n"
    fast = _profile(tmp_path, base, "fast")
    # the DSP's depthwise kernels measured slow: its stage of the pipeline grows by their time
    slow = _profile(
        tmp_path,
        base + "hook_speeds: {dsp: {dwconv2d_s8: 0.001, dwconv2d_bwd_data_s8: 0.001, dwconv2d_bwd_weight_s8: 0.001}}\n",
        "slow",
    )
    plan = place(graph, {"dsp": _Backend("dsp"), "cpu": _Backend("cpu")}, co_schedule=True)
    work = plan.replace(device=fast).pipeline_work()
    dw_macs = sum(op.macs for op in graph.ops if op.layer == "dw" and op.phase != "update")
    _, why_fast = micro_batch_count(work, fast, 64)
    _, why_slow = micro_batch_count(work, slow, 64)
    dsp_ms = lambda why: float(why.split("DSP ")[1].split(" ms")[0])  # noqa: E731
    assert dsp_ms(why_slow) - dsp_ms(why_fast) == pytest.approx(dw_macs / (0.001 * 1e9) * 1e3, rel=0.01)
    # batch splitting: a product compute-bound at its measured rate saves nothing by fitting the L2
    op = graph.op("dw.fwd")
    streamed = 2 * graph.tensors["dw.out"].nbytes
    assert split_net_seconds(fast, "cpu", streamed, 0, 0, 2, op.macs) > 0
    slow_cpu = _profile(tmp_path, base + "hook_speeds: {cpu: {dwconv2d_s8: 1.0e+3}}\n", "slowcpu")
    assert split_net_seconds(slow_cpu, "cpu", streamed, 0, 0, 2, op.macs, "dwconv2d_s8") < 0
    assert split_net_seconds(slow_cpu, "cpu", streamed, 0, 0, 2, op.macs) > 0


@pytest.mark.parametrize(
    "text, key, shown",
    [
        ("hook_speeds: {cpu: {dwconv3d_s8: 1.0e+9}}", "hook_speeds.cpu.dwconv3d_s8", "dwconv3d_s8"),
        ("hook_speeds: {cpu: {dwconv2d_s8: -5.0}}", "hook_speeds.cpu.dwconv2d_s8", "-5.0"),
        ("hook_speeds: {cpu: {dwconv2d_s8: fast}}", "hook_speeds.cpu.dwconv2d_s8", "'fast'"),
        ("hook_speeds: {dsp: {conv2d_s8: 1.0e+9}}", "hook_speeds.dsp.conv2d_s8", "1000000000.0"),
        ("hook_speeds: {dsp: {conv2d_s8: .nan}}", "hook_speeds.dsp.conv2d_s8", "nan"),
        ("hook_speeds: {gpu: {conv2d_s8: 1.0}}", "hook_speeds.gpu", "unknown key"),
        ("hook_speeds: {measured: {npu: today}}", "hook_speeds.measured.npu", "today"),
    ],
)
def test_bad_hook_speeds_name_file_key_and_value(tmp_path, text, key, shown):
    with pytest.raises(ConfigError) as info:
        _profile(tmp_path, text + "\n", "bad")
    assert "bad.yaml" in str(info.value) and key in str(info.value) and shown in str(info.value)


def test_a_bad_profile_is_one_error_line_from_the_command_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nhook_speeds: {cpu: {dwconv2d_s8: -1.0}}\n")
    assert main(["calibrate", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dsptrain: error:") and "hook_speeds.cpu.dwconv2d_s8" in err[0]
    assert "bad.yaml" in err[0] and "-1.0" in err[0]


def test_the_written_block_replaces_itself_and_keeps_the_rest(tmp_path):
    source = tmp_path / "dev.yaml"
    source.write_text("# a hand-written profile\nname: dev\ncpu: {call_s: 1.0e-4}  # kept\n")
    first = HookSpeeds({"cpu": "first run"}, {"conv2d_s8": 1.5e10, "dwconv2d_s8": 2.0e9}, {})
    write_profile(source, source, first)
    loaded = load_device(str(source))
    assert loaded.hook_speeds.cpu == pytest.approx({"conv2d_s8": 1.5e10, "dwconv2d_s8": 2.0e9})
    assert loaded.hook_speeds.measured == {"cpu": "first run"} and loaded.cpu.call_s == 1e-4
    second = HookSpeeds({"cpu": "a", "dsp": 'say "b"'}, {"gemm_s8": 1.25e10}, {"dwconv2d_s8": 47.5})
    write_profile(source, tmp_path / "copy.yaml", second)
    text = (tmp_path / "copy.yaml").read_text()
    assert text.count("\nhook_speeds:") == 1 and text.startswith("# a hand-written profile\n")
    assert "# kept" in text and text.count("written by `dsptrain calibrate`") == 1
    copy = load_device(str(tmp_path / "copy.yaml"))
    assert copy.hook_speeds == HookSpeeds({"cpu": "a", "dsp": 'say "b"'}, {"gemm_s8": 1.25e10}, {"dwconv2d_s8": 47.5})
    assert load_device(str(source)).hook_speeds.cpu == loaded.hook_speeds.cpu  # --out left the source alone
    # a block in the middle is replaced where it stands; the key after it stays
    middle = with_speeds_block("name: m\n" + speeds_block(first) + "description: after\n", speeds_block(second))
    assert middle.count("\nhook_speeds:") == 1 and middle.endswith("description: after\n") and "gemm_s8" in middle
    # a profile that does not load is never written
    with pytest.raises(ConfigError):
        write_profile(source, source, HookSpeeds({}, {"nope": 1.0}, {}))
    assert load_device(str(source)).hook_speeds.cpu == loaded.hook_speeds.cpu
    assert not list(tmp_path.glob(".*calibrate*"))


def test_plan_ops_shows_each_ops_modeled_time_and_rate(tmp_path, capsys):
    profile = tmp_path / "dev.yaml"
    profile.write_text("name: dev\nhook_speeds: {cpu: {conv2d_s8: 1.0e+9}, dsp: {conv2d_s8: 10.0}}\n")
    run = tmp_path / "run.yaml"
    run.write_text(
        f"name: r\nrecipe: niti\nmodel: {{name: lenet5}}\ndata: {{dataset: synthetic}}\n"
        f"scheduler: {{device: {profile}}}\n"
    )
    assert main(["plan", str(run), "--backend", "ref", "--ops"]) == 0
    out = capsys.readouterr().out
    assert "modeled time per op (profile dev" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("conv1.fwd "))
    fields = line.split()
    # conv1 of LeNet-5 at batch 64 (28 x 28 out, 6 channels, 5 x 5 taps) at the CPU's measured 1e9 MAC/s, plus a call
    macs = 64 * 28 * 28 * 6 * 25
    assert fields[1] == "ref" and float(fields[3]) == pytest.approx(macs, rel=1e-3)
    assert fields[-2:] == ["measured", "conv2d_s8"]
    assert float(fields[2]) == pytest.approx((macs / 1e9 + 2e-5) * 1e3, rel=1e-3)
    assert "relu1.fwd" in out and "total: cpu" in out
    assert main(["plan", str(run), "--backend", "ref", "--ops", "3"]) == 0
    out = capsys.readouterr().out
    assert "the 3 longest of" in out
