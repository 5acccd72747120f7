"""The DSP's modeled time (cost.dsp_model_time): packets on the critical path over the
profile's clock, the DDR term where bytes dominate, a call cost per batch; the profile
keys it reads; the per-op byte counts it is fed (no native code)."""

import pytest
from dsptrain.backends import dsp_abi
from dsptrain.config import ConfigError, load_device
from dsptrain.cost import dsp_model_time, dsp_op_seconds
from dsptrain.execute import StepStats
from dsptrain.train import _step_record


def _profile(tmp_path, dsp: str, name="p"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ndsp: {{{dsp}}}\n")
    return load_device(path)


def test_compute_bound_op_costs_its_critical_packets_over_the_clock(tmp_path):
    p = _profile(tmp_path, "clock_hz: 2.0e+9, bytes_per_s: 1.0e+10, call_s: 1.0e-4")
    # 4e6 critical packets at 2 GHz = 2 ms; 1e6 bytes at 10 GB/s = 0.1 ms: compute wins
    assert dsp_op_seconds(p, 4_000_000, 1_000_000) == pytest.approx(2e-3)
    t = dsp_model_time(p, [("gemm_s8", 9_000_000, 4_000_000, 1_000_000)], calls=3)
    assert (t.compute_s, t.memory_s, t.call_s) == pytest.approx((2e-3, 0.0, 3e-4))
    assert t.seconds == pytest.approx(2.3e-3)


def test_memory_bound_op_adds_what_ddr_takes_beyond_compute(tmp_path):
    p = _profile(tmp_path, "clock_hz: 1.0e+9, bytes_per_s: 1.0e+9, call_s: 1.0e-4")
    # relu-like: 1000 packets (1 us) but 1e6 bytes (1 ms) through DDR
    t = dsp_model_time(p, [("relu_s8", 1000, 1000, 1_000_000)], calls=1)
    assert t.compute_s == pytest.approx(1e-6)
    assert t.memory_s == pytest.approx(1e-3 - 1e-6)
    assert t.seconds == pytest.approx(1e-3 + 1e-4)
    assert dsp_op_seconds(p, 1000, 1_000_000) == pytest.approx(1e-3)


def test_threads_shorten_only_the_critical_path(tmp_path):
    p = _profile(tmp_path, "clock_hz: 1.0e+9")
    serial = dsp_model_time(p, [("conv2d_s8", 8_000_000, 8_000_000, 0)], 0)
    split = dsp_model_time(p, [("conv2d_s8", 8_000_000, 2_100_000, 0)], 0)
    assert serial.seconds == pytest.approx(8e-3) and split.seconds == pytest.approx(2.1e-3)


def test_v66_profile_has_the_clock_and_four_hvx_threads():
    p = load_device("v66")
    assert p.dsp.hvx_threads == 4 and p.dsp.clock_hz == 1.0e9


@pytest.mark.parametrize(
    "setting,key",
    [
        ("clock_hz: 0", "dsp.clock_hz"),
        ("clock_hz: -1", "dsp.clock_hz"),
        ("hvx_threads: 0", "dsp.hvx_threads"),
        ("hvx_threads: 9", "dsp.hvx_threads"),
        ("hvx_threads: four", "dsp.hvx_threads"),
    ],
)
def test_bad_dsp_time_keys_name_key_and_value(tmp_path, setting, key):
    with pytest.raises(ConfigError) as err:
        _profile(tmp_path, setting, "bad")
    assert key in str(err.value) and setting.split(": ")[1] in str(err.value)


def test_desc_bytes_counts_operands_and_int32_accumulators():
    d = dsp_abi.OpDesc()
    d.op, d.dtype = dsp_abi.OP_GEMM_S8, dsp_abi.I8
    d.shape_a[:], d.shape_b[:], d.shape_out[:] = (64, 256, 1, 1), (120, 256, 1, 1), (64, 120, 1, 1)
    assert dsp_abi.desc_bytes(d) == 64 * 256 + 120 * 256 + 4 * 64 * 120
    d.op, d.dtype = dsp_abi.OP_REQUANT, dsp_abi.I32
    d.shape_a[:], d.shape_out[:] = (1000, 1, 1, 1), (1000, 1, 1, 1)
    assert dsp_abi.desc_bytes(d) == 4 * 1000 + 1000


def test_step_record_carries_the_modeled_dsp_time():
    stats = StepStats(3, 0, 64)
    assert _step_record(stats)["dsp_model_s"] is None
    stats.dsp_model_s = 0.012
    assert _step_record(stats)["dsp_model_s"] == 0.012
