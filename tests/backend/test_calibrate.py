"""`dsptrain calibrate`'s measurements (runtime/calibrate.py): every representative case runs
its hook on the CPU backend and on the emulated DSP, and a rate is the cases' weighted MACs
over their weighted cost (seconds; critical-path packets), within what the hardware can do."""

import pytest
from dsptrain.calibrate import LINEAR, MOBILENET_DW, MOBILENET_PW, VGG11_CONV, cases, measure, rates
from dsptrain.cost import RATE_KEYS


def _weighted(rows, key):
    picked = [r for r in rows if r["key"] == key]
    return sum(r["count"] * r["macs"] for r in picked) / sum(r["count"] * r["cost"] for r in picked)


def test_cases_cover_every_rate_key_with_the_models_shapes():
    got = cases(2)
    assert {c.key for c in got} == set(RATE_KEYS)
    per_key = {k: [c for c in got if c.key == k] for k in RATE_KEYS}
    assert len(per_key["dwconv2d_s8"]) == len(MOBILENET_DW) and len(per_key["gemm_s8"]) == len(LINEAR)
    assert len(per_key["conv2d_s8.pointwise"]) == len(MOBILENET_PW) and len(per_key["conv2d_s8"]) == len(VGG11_CONV)
    # MACs count every tap, as graph.lower counts a layer's: a stride-2 depthwise layer of
    # 96 channels on 16 x 16 has 8 x 8 outputs of 9 taps each per image
    dw = next(c for c in per_key["dwconv2d_bwd_data_s8"] if c.shape == "dw 96 16x16 s2")
    assert dw.macs == 2 * 8 * 8 * 96 * 9


def test_cpu_rates_are_the_weighted_macs_over_the_fastest_times():
    from dsptrain.backends.ops_cpu import CpuBackend

    got, rows = measure("cpu", CpuBackend(), 2, 1, only={"dwconv2d_s8", "conv2d_bwd_weight_s8.pointwise"})
    assert set(got) == {"dwconv2d_s8", "conv2d_bwd_weight_s8.pointwise"}
    assert len(rows) == len(MOBILENET_DW) + len(MOBILENET_PW)
    for key, rate in got.items():
        assert rate == pytest.approx(_weighted(rows, key)) and rate > 0
    assert all(r["cost"] > 0 for r in rows)


def test_dsp_rates_are_macs_per_critical_packet_within_the_hvx_ceiling(dsp):
    dsp.hvx_threads = 4
    only = {"dwconv2d_s8", "dwconv2d_bwd_weight_s8", "gemm_s8"}
    got, rows = measure("dsp", dsp, 4, 1, only=only)
    assert set(got) == only
    for key, rate in got.items():
        assert rate == pytest.approx(_weighted(rows, key))
        # two 128-MAC vrmpy a packet is one HVX thread's ceiling; four threads share the work
        assert 0 < rate <= 4 * 256, key
    assert all(isinstance(r["cost"], int) and r["cost"] > 0 for r in rows)
    assert rates({}) == {}


def test_the_command_writes_what_it_measured_and_keeps_the_rest(tmp_path, capsys):
    from dsptrain.cli import main
    from dsptrain.config import load_device

    source = tmp_path / "dev.yaml"
    source.write_text("name: dev\n# hand-written\nhook_speeds: {dsp: {dwconv2d_s8: 40.0}, cpu: {conv2d_s8: 1.0e+9}}\n")
    out = tmp_path / "measured.yaml"
    args = ["calibrate", str(source), "--backends", "cpu", "--only", "gemm_s8", "--batch", "2", "--repeats", "1"]
    assert main([*args, "--out", str(out)]) == 0
    assert "gemm_s8" in capsys.readouterr().out
    got = load_device(str(out)).hook_speeds
    assert got.cpu["gemm_s8"] > 0 and got.cpu["conv2d_s8"] == 1.0e9 and got.dsp == {"dwconv2d_s8": 40.0}
    assert "batch 2" in got.measured["cpu"] and "dsp" not in got.measured
    assert "# hand-written" in out.read_text() and load_device(str(source)).hook_speeds.cpu == {"conv2d_s8": 1.0e9}
    assert main([*args, "--dry-run"]) == 0 and "nothing written" in capsys.readouterr().out
    assert main(["calibrate", str(source), "--only", "gemm_s9"]) == 2
    assert "gemm_s9" in capsys.readouterr().err
