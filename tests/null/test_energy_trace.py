"""Power-monitor trace meter on CSV files written in tmp_path."""

import math
import time

import pytest
from dsptrain.energy import MeterError, TraceMeter, align_trace, load_trace

T0 = 1_700_000_000.0  # a Unix time


def test_monsoon_header_ms_mA_relative_time_with_offset(tmp_path):
    f = tmp_path / "monsoon.csv"
    rows = [f"{ms},500.0,4.0,0.0" for ms in range(0, 2001, 10)]  # 0-2 s, 2 W
    f.write_text("Time(ms),Main(mA),Main Voltage(V),USB(mA)\n" + "\n".join(rows) + "\n")
    trace = load_trace(f, offset_s=T0)
    (r,) = align_trace(trace, [(T0 + 0.5, T0 + 1.5)])
    assert (r.meter, r.estimated) == ("trace", False)
    assert r.joules == pytest.approx(2.0)


def test_headerless_seconds_amps_volts_linear_power(tmp_path):
    f = tmp_path / "plain.csv"
    # power = (t - T0) watts at 1 V: its integral over [1, 3] is 4 J; the window edges
    # fall between samples, so this also checks the interpolation at the edges.
    f.write_text("\n".join(f"{T0 + k * 0.4:.6f},{k * 0.4:.6f},1.0" for k in range(11)))
    (r,) = align_trace(load_trace(f), [(T0 + 1.0, T0 + 3.0)])
    assert r.joules == pytest.approx(4.0, rel=1e-6)


def test_extra_columns_and_unit_order(tmp_path):
    f = tmp_path / "extra.csv"
    f.write_text("voltage (V),index,timestamp (s),current (A)\n" + "\n".join(f"3.0,{k},{T0 + k},2.0" for k in range(5)))
    (r,) = align_trace(load_trace(f), [(T0, T0 + 4)])
    assert r.joules == pytest.approx(24.0)


def test_batch_not_covered_is_nan_with_message(tmp_path):
    f = tmp_path / "short.csv"
    f.write_text("\n".join(f"{T0 + k},1.0,1.0" for k in range(10)))
    trace = load_trace(f)
    inside, late, early = align_trace(trace, [(T0 + 1, T0 + 2), (T0 + 8, T0 + 12), (T0 - 1, T0 + 1)])
    assert inside.joules == pytest.approx(1.0)
    for r in (late, early):
        assert math.isnan(r.joules) and not r.ok
        assert "not covered" in r.detail["error"] and str(f) in r.detail["error"]


def test_gap_inside_batch_is_not_covered(tmp_path):
    f = tmp_path / "gap.csv"
    ts = [T0 + k * 0.1 for k in range(10)] + [T0 + 5 + k * 0.1 for k in range(10)]
    f.write_text("\n".join(f"{t},1.0,1.0" for t in ts))
    (r,) = align_trace(load_trace(f), [(T0 + 0.5, T0 + 5.5)])
    assert math.isnan(r.joules) and "gap" in r.detail["error"]


def test_relative_times_without_offset_is_an_error(tmp_path):
    f = tmp_path / "rel.csv"
    f.write_text("0,1,1\n1,1,1\n")
    with pytest.raises(MeterError, match="offset_s"):
        load_trace(f)


def test_bad_row_names_file_and_row(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text(f"t,current,voltage\n{T0},1,1\n{T0 + 1},one,1\n")
    with pytest.raises(MeterError, match=r"bad.csv row 3"):
        load_trace(f)


def test_live_meter_then_realign_after_run(tmp_path):
    f = tmp_path / "live.csv"
    meter = TraceMeter(f)
    meter.start()
    r = meter.stop()  # trace not written yet: NaN, not zero
    assert math.isnan(r.joules) and "live.csv" in r.detail["error"]
    now = time.time()
    f.write_text("\n".join(f"{now - 60 + k * 0.5},0.5,4.0" for k in range(241)))
    meter.start()
    r2 = meter.stop()
    assert r2.ok and r2.joules == pytest.approx(2.0 * (r2.detail["t_end"] - r2.detail["t_start"]))
    first, second = meter.readings()  # after the run both batches are covered
    assert first.ok and second.joules == pytest.approx(r2.joules)


def test_strict_meter_raises(tmp_path):
    f = tmp_path / "old.csv"
    f.write_text("\n".join(f"{T0 + k},1.0,1.0" for k in range(10)))
    meter = TraceMeter(f, strict=True)
    meter.start()
    with pytest.raises(MeterError, match="not covered"):
        meter.stop()
