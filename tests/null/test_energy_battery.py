"""Battery fuel-gauge meter on fake /sys/class/power_supply trees in tmp_path."""

import math
import threading
import time
from pathlib import Path

import pytest
from dsptrain.energy import BatteryMeter, MeterError, MeterUnavailable

PERIOD = 0.005


def supply(root: Path, name: str, kind: str = "Battery", current=None, voltage=None, status=None) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "type").write_text(kind + "\n")
    for fname, value in (("current_now", current), ("voltage_now", voltage), ("status", status)):
        if value is not None:
            (d / fname).write_text(f"{value}\n")
    return d


def sampler_threads():
    return [t for t in threading.enumerate() if t.name.startswith("dsptrain-battery")]


@pytest.fixture
def meters():
    made = []
    yield made
    for m in made:
        m.close()
    assert not sampler_threads(), "a sampler thread outlived its meter"


def batch(meter, seconds=0.03):
    meter.start()
    time.sleep(seconds)
    return meter.stop()


def test_finds_battery_among_supplies_and_integrates_uA_uV(tmp_path, meters):
    supply(tmp_path, "usb", kind="USB", current=0, voltage=5_000_000)
    supply(tmp_path, "battery", current=-1_000_000, voltage=4_000_000, status="Discharging")
    meters.append(m := BatteryMeter(tmp_path, period_s=PERIOD))
    r = batch(m)
    assert m.node.name == "battery"
    assert (r.meter, r.estimated, r.detail["units"]) == ("battery", False, "uA,uV")
    assert r.detail["samples"] >= 2
    assert r.joules == pytest.approx(4.0 * r.detail["window_s"], rel=1e-9)


def test_mA_mV_device_with_positive_discharge_sign(tmp_path, meters):
    supply(tmp_path, "bms", current=1000, voltage=4000, status="Discharging")
    meters.append(m := BatteryMeter(tmp_path, period_s=PERIOD))
    r = batch(m)
    assert r.detail["units"] == "mA,mV"
    assert r.detail["discharge_sign"] == 1
    assert r.joules == pytest.approx(4.0 * r.detail["window_s"], rel=1e-9)


def test_unit_override(tmp_path, meters):
    # 5000 would be taken as mA (5 A); the caller knows this gauge reports uA.
    supply(tmp_path, "battery", current=-5000, voltage=4_000_000, status="Discharging")
    meters.append(m := BatteryMeter(tmp_path, period_s=PERIOD, current_unit="uA"))
    r = batch(m)
    assert r.joules == pytest.approx(0.02 * r.detail["window_s"], rel=1e-9)


def test_charging_reads_nan_with_message_unless_allowed(tmp_path, meters):
    d = supply(tmp_path, "battery", current=500_000, voltage=4_000_000, status="Charging")
    meters.append(m := BatteryMeter(tmp_path, period_s=PERIOD))
    r = batch(m)
    assert math.isnan(r.joules) and not r.ok
    assert "Charging" in r.detail["error"] and str(d / "status") in r.detail["error"]
    meters.append(net := BatteryMeter(tmp_path, period_s=PERIOD, allow_charging=True))
    r = batch(net)
    # Kernel convention (no discharge seen yet): positive current flows into the battery.
    assert r.joules == pytest.approx(-2.0 * r.detail["window_s"], rel=1e-9)


def test_sign_learned_while_discharging_applies_when_status_unknown(tmp_path, meters):
    d = supply(tmp_path, "battery", current=250_000, voltage=4_000_000, status="Discharging")
    meters.append(m := BatteryMeter(tmp_path, period_s=PERIOD))
    assert batch(m).joules > 0
    (d / "status").write_text("Unknown\n")
    r = batch(m)
    assert r.joules == pytest.approx(1.0 * r.detail["window_s"], rel=1e-9)


def test_baseline_is_subtracted(tmp_path, meters):
    d = supply(tmp_path, "battery", current=-250_000, voltage=4_000_000, status="Discharging")
    meters.append(m := BatteryMeter(tmp_path, period_s=PERIOD))
    assert m.measure_baseline(0.03) == pytest.approx(1.0)
    (d / "current_now").write_text("-1000000\n")
    r = batch(m)
    assert r.detail["gross_j"] == pytest.approx(4.0 * r.detail["window_s"], rel=1e-9)
    assert r.joules == pytest.approx(3.0 * r.detail["window_s"], rel=1e-9)


def test_sampler_error_surfaces_on_stop_and_thread_ends(tmp_path, meters):
    d = supply(tmp_path, "battery", current=-1_000_000, voltage=4_000_000, status="Discharging")
    meters.append(m := BatteryMeter(tmp_path, period_s=PERIOD))
    m.start()
    (d / "voltage_now").unlink()
    (d / "voltage_now").mkdir()  # unreadable whatever the user: a directory
    deadline = time.monotonic() + 2.0
    while m._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(PERIOD)
    assert not m._thread.is_alive(), "sampler thread kept running after a read error"
    with pytest.raises(MeterError, match=r"sampler thread.*voltage_now"):
        m.stop()


def test_close_stops_thread_and_context_manager(tmp_path):
    supply(tmp_path, "battery", current=-1_000_000, voltage=4_000_000, status="Discharging")
    with BatteryMeter(tmp_path, period_s=PERIOD) as m:
        batch(m, 0.01)
        assert len(sampler_threads()) == 1
    assert not sampler_threads()
    m.close()  # twice is fine
    with pytest.raises(MeterError, match="closed"):
        m.start()


def test_no_battery_or_no_gauge_files(tmp_path):
    supply(tmp_path, "ac", kind="Mains")
    with pytest.raises(MeterUnavailable, match="no power supply of type Battery"):
        BatteryMeter(tmp_path)
    supply(tmp_path, "BAT0", status="Discharging")
    with pytest.raises(MeterUnavailable, match=r"\['BAT0'\].*current_now"):
        BatteryMeter(tmp_path)


def test_unreadable_current_fails_at_construction_naming_file(tmp_path):
    d = supply(tmp_path, "battery", current=0, voltage=4_000_000)
    (d / "current_now").unlink()
    (d / "current_now").mkdir()
    with pytest.raises(MeterUnavailable, match=r"battery/current_now"):
        BatteryMeter(tmp_path)


def test_trapezoid_interpolates_at_window_edges():
    from dsptrain.energy.base import integrate_power

    ts = [0.0, 0.4, 0.8, 1.2, 1.6, 2.0, 2.4, 2.8, 3.2]
    # power = t watts: the integral over [1, 3] is 4 J exactly; the edges fall between
    # samples, so a wrong edge value (nearest sample, say) changes the answer.
    assert integrate_power(ts, ts, 1.0, 3.0) == pytest.approx(4.0)
    assert integrate_power(ts, ts, 1.1, 1.15) == pytest.approx(0.05 * 1.125)
    assert integrate_power(ts, ts, 2.0, 2.0) == 0.0
