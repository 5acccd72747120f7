"""The estimate meter, its coefficient tables, and make_meter's choices."""

import pytest
from dsptrain.energy import (
    DEVICES,
    BatteryMeter,
    EstimateMeter,
    MeterError,
    RaplMeter,
    TraceMeter,
    WorkCounts,
    make_meter,
)
from dsptrain.errors import UserError


def test_estimate_is_counts_times_coefficients_and_labelled():
    sd = DEVICES["sd865"]
    meter = EstimateMeter("sd865")
    meter.start()
    meter.record_work(int8_macs={"dsp": 10**9}, bytes_moved=10**6)
    meter.record_work(WorkCounts({"dsp": 10**9, "cpu": 10**8}, fp32_flops=0))
    r = meter.stop(WorkCounts({}, fp32_flops=10**7))
    expected = (
        2e9 * sd.pj_per_int8_mac["dsp"]
        + 1e8 * sd.pj_per_int8_mac["cpu"]
        + 1e7 * sd.pj_per_fp32_flop
        + 1e6 * sd.pj_per_byte
    ) * 1e-12
    assert r.joules == pytest.approx(expected)
    assert (r.meter, r.estimated) == ("estimate:sd865", True)
    assert r.detail["work"]["int8_macs"] == {"dsp": 2 * 10**9, "cpu": 10**8}
    meter.start()  # counts do not leak into the next batch
    assert meter.stop().joules == 0.0


def test_static_power_is_added_per_second():
    meter = EstimateMeter("x86", static_w=2.0)
    meter.start()
    r = meter.stop()
    assert r.detail["parts_j"]["static"] == pytest.approx(2.0 * r.detail["seconds"])


def test_tables_are_positive_and_the_dsp_beats_the_cpu_per_mac():
    for dev in DEVICES.values():
        values = [*dev.pj_per_int8_mac.values(), dev.pj_per_fp32_flop, dev.pj_per_byte]
        assert all(v > 0 for v in values), dev.name
        assert dev.note
    sd = DEVICES["sd865"]
    assert sd.pj_per_int8_mac["dsp"] < sd.pj_per_int8_mac["cpu"] < sd.pj_per_fp32_flop


def test_backend_without_coefficient_is_refused_by_name():
    meter = EstimateMeter("x86")
    meter.start()
    with pytest.raises(MeterError, match=r"x86.*'dsp'"):
        meter.stop(WorkCounts({"dsp": 5}))
    with pytest.raises(ValueError, match="unknown device 'pixel'"):
        EstimateMeter("pixel")


def fake_rapl(root):
    z = root / "intel-rapl:0"
    z.mkdir(parents=True)
    for name, value in (("name", "package-0"), ("energy_uj", 1), ("max_energy_range_uj", 99)):
        (z / name).write_text(f"{value}\n")


def fake_battery(root, status):
    b = root / "battery"
    b.mkdir(parents=True)
    for name, value in (("type", "Battery"), ("status", status), ("current_now", -(10**6)), ("voltage_now", 4 * 10**6)):
        (b / name).write_text(f"{value}\n")


def test_make_meter_explicit_specs(tmp_path):
    fake_rapl(tmp_path / "pc")
    m, why = make_meter("rapl", powercap_root=tmp_path / "pc")
    assert isinstance(m, RaplMeter) and "rapl" in why
    m, _ = make_meter("estimate:x86")
    assert isinstance(m, EstimateMeter) and m.device.name == "x86"
    m, _ = make_meter(f"trace:{tmp_path / 'mon.csv'}", offset_s=0.0)
    assert isinstance(m, TraceMeter) and m.path.name == "mon.csv"
    with pytest.raises(UserError, match="'watts'.*auto"):
        make_meter("watts")


def test_auto_prefers_battery_on_android_and_rapl_elsewhere(tmp_path):
    fake_rapl(tmp_path / "pc")
    fake_battery(tmp_path / "ps", "Discharging")
    roots = dict(powercap_root=tmp_path / "pc", power_supply_root=tmp_path / "ps")
    m, why = make_meter("auto", android=True, **roots)
    assert isinstance(m, BatteryMeter) and why.startswith("auto: battery")
    m.close()
    m, why = make_meter("auto", android=False, **roots)
    assert isinstance(m, RaplMeter) and why.startswith("auto: rapl")


def test_auto_falls_back_to_estimate_and_says_why(tmp_path):
    fake_battery(tmp_path / "ps", "Charging")
    m, why = make_meter("auto", android=True, powercap_root=tmp_path / "none", power_supply_root=tmp_path / "ps")
    assert isinstance(m, EstimateMeter) and m.estimated
    assert "charger connected" in why and "does not exist" in why and "estimate" in why


def test_stop_accepts_a_step_stats_and_says_how_it_read_it():
    class Stats:  # the shape of executor.StepStats today: macs per backend only
        macs = {"cpu": 10**6}

    meter = EstimateMeter("sd865")
    meter.start()
    r = meter.stop(Stats())
    assert r.joules == pytest.approx(1e6 * DEVICES["sd865"].pj_per_int8_mac["cpu"] * 1e-12)
    assert "taken as int8" in r.detail["work"]["note"]

    class Counted:  # what the estimate wants: counts split by kind
        int8_macs, fp32_flops, bytes_moved = {"dsp": 10}, 20, 30

    assert WorkCounts.of(Counted()).as_dict() == {"int8_macs": {"dsp": 10}, "fp32_flops": 20, "bytes_moved": 30}
    with pytest.raises(TypeError, match="got int"):
        WorkCounts.of(3)
