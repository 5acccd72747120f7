"""DSP kernels under the emulator: int8 MACs per packet, modeled DSP time, subgraph reuse.

    python bench/bench_dsp.py [--quick] [--device v66] [--steps lenet5,vgg11]
    python bench/bench_dsp.py --only mobilenet      # MobileNetV2's convolutions alone
    python bench/bench_dsp.py --only steps --steps lenet5,vgg11,mobilenet_v2   # the NITI training steps alone

Per kernel: packets, instructions and HVX instructions from QEMU's counters
(c20/c21/c22) and MACs per packet (two vrmpy per packet make 256 the ceiling of one
HVX thread; the issue's 128 counts one). Each op's work is split across the profile's
HVX threads, run for real: share t on worker thread t of the DSP server (qemu-hexagon runs
each as a host thread), which counts its own packets on its own counters: the t0..t3
columns are measured per thread, `serial` is the calling thread's part (packing, the
unsplit ops), and crit is serial + each split's longest share (cost.critical). Modeled
time (runtime/cost.py):
critical packets / dsp.clock_hz, or the DDR
bytes / dsp.bytes_per_s when larger, plus dsp.call_s per call. Then NITI training
steps of LeNet-5 and VGG-11 (batch 64) through the Trainer on the emulated DSP, the
modeled DSP time per step beside Mandheling's 0.23 s (VGG-11, CIFAR-10, batch 64, its
end-to-end table) and the CPU's share measured here; the step in modeled time (the DSP's
modeled seconds with the CPU's measured ones, overlapped as the plan's micro-batches run
them) at the profile's clock and at 500 MHz; the share of ops and of int8 MACs the plan put
on the DSP, and of the depthwise ops (placement reads the profile's measured per-product
speeds, `dsptrain calibrate`). `--only steps` runs the steps alone (bench/results/dsp_steps.json).
Last, a LeNet-shaped step with subgraph reuse on and off (wall time under QEMU). Tables on
stdout, CSV and JSON in bench/results/.

MobileNetV2 (torchvision's, width 1.0, 32 x 32 input, batch 64): each distinct depthwise
(3 x 3, pad 1) and pointwise shape once, forward, backward data and weight gradient on
int32 sums, `count` the times the model has it; MACs count every tap (padding too, as
layer MAC counts do), `inside` those whose input lies in the image; `path` the kernel the
DSP took; modeled time on the profile's clock and at 500 MHz (the cDSP clock Mandheling's
device table gives for the Snapdragon 865), compute only (critical packets / clock).
Rows `all depthwise` / `all pointwise` sum over the model (each shape times its count).
Written to bench/results/dsp_mobilenet.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from dsptrain.backends.ops_dsp import DspBackend

# torchvision's mobilenet_v2 at 32 x 32: its depthwise (hw, C, stride, count) and pointwise
# (hw, C_in, C_out, count) layers, the shapes `dsptrain calibrate` measures
from dsptrain.calibrate import MOBILENET_DW, MOBILENET_PW
from dsptrain.config import load_device
from dsptrain.cost import dsp_model_time
from dsptrain.numerics import RngKey

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsp_steps import SD865_CDSP_HZ, print_steps, step_rows  # noqa: E402
from report import write_results  # noqa: E402

R = np.random.default_rng(0)
OUT = Path(__file__).resolve().parent / "results"


def s8(*shape):
    return R.integers(-127, 128, shape, dtype=np.int8)


def kernels(quick: bool):
    g = 128 if quick else 256
    rng = RngKey(1, 2, 3)
    yield "gemm 128-mult", g * g * g, lambda d: d.gemm_s8(s8(g, g), s8(g, g))
    yield "gemm ragged", 100 * 70 * 131, lambda d: d.gemm_s8(s8(100, 131), s8(70, 131))
    yield (
        "conv fwd 3x3 32->32",
        4 * 16 * 16 * 32 * 9 * 32,
        lambda d: d.conv2d_s8(s8(4, 16, 16, 32), s8(32, 3, 3, 32), 1, 1),
    )
    yield (
        "conv bwd data",
        4 * 16 * 16 * 32 * 9 * 32,
        lambda d: d.conv2d_bwd_data_s8(s8(4, 16, 16, 32), s8(32, 3, 3, 32), 1, 1, (16, 16)),
    )
    yield (
        "conv bwd weight",
        4 * 16 * 16 * 32 * 9 * 32,
        lambda d: d.conv2d_bwd_weight_s8(s8(4, 16, 16, 32), s8(4, 16, 16, 32), 1, 1, (3, 3)),
    )
    yield "lenet conv1 fwd", 32 * 24 * 24 * 25 * 6, lambda d: d.conv2d_s8(s8(32, 28, 28, 1), s8(6, 5, 5, 1), 1, 0)
    yield "lenet conv2 fwd", 32 * 8 * 8 * 150 * 16, lambda d: d.conv2d_s8(s8(32, 12, 12, 6), s8(16, 5, 5, 6), 1, 0)
    yield (
        "lenet conv2 bwd data",
        32 * 8 * 8 * 150 * 16,
        lambda d: d.conv2d_bwd_data_s8(s8(32, 8, 8, 16), s8(16, 5, 5, 6), 1, 0, (12, 12)),
    )
    yield (
        "lenet conv1 bwd weight",
        32 * 24 * 24 * 25 * 6,
        lambda d: d.conv2d_bwd_weight_s8(s8(32, 24, 24, 6), s8(32, 28, 28, 1), 1, 0, (5, 5)),
    )
    yield (
        "lenet conv2 bwd weight",
        32 * 8 * 8 * 150 * 16,
        lambda d: d.conv2d_bwd_weight_s8(s8(32, 8, 8, 16), s8(32, 12, 12, 6), 1, 0, (5, 5)),
    )
    yield (
        "vgg conv 3x3 128->128 8x8",
        16 * 8 * 8 * 128 * 9 * 128,
        lambda d: d.conv2d_s8(s8(16, 8, 8, 128), s8(128, 3, 3, 128), 1, 1),
    )
    yield (
        "vgg bwd data 128 8x8",
        16 * 8 * 8 * 128 * 9 * 128,
        lambda d: d.conv2d_bwd_data_s8(s8(16, 8, 8, 128), s8(128, 3, 3, 128), 1, 1, (8, 8)),
    )
    yield (
        "vgg bwd weight 128 8x8",
        16 * 8 * 8 * 128 * 9 * 128,
        lambda d: d.conv2d_bwd_weight_s8(s8(16, 8, 8, 128), s8(16, 8, 8, 128), 1, 1, (3, 3)),
    )
    yield "vgg conv1 3->64 32x32", 4 * 32 * 32 * 27 * 64, lambda d: d.conv2d_s8(s8(4, 32, 32, 3), s8(64, 3, 3, 3), 1, 1)
    acc = R.integers(-(2**20), 2**20, 32768, dtype=np.int32)
    for mode in ("round", "psto", "sto"):
        yield f"requant {mode} (32K)", 0, lambda d, m=mode: d.requantize(acc, m, rng)
    yield "relu (32K)", 0, lambda d: d.relu_s8(s8(32768))
    yield "maxpool 2x2 C=128", 0, lambda d: d.maxpool_s8(s8(2, 16, 16, 128), 2, 2)


def inside_taps(hw: int, k: int, stride: int, pad: int) -> int:
    """Taps of a k x k window over an hw x hw image whose input lies inside it, summed over outputs."""
    out = (hw + 2 * pad - k) // stride + 1
    per_axis = sum(sum(0 <= o * stride + i - pad < hw for i in range(k)) for o in range(out))
    return per_axis * per_axis


def measure(d: DspBackend, fn) -> tuple[int, int, list]:
    fn(d)  # warm: the server started, the descriptors prepared
    d.take_cost_log()
    fn(d)
    log, _ = d.take_cost_log()
    return sum(c[1] for c in log), sum(c[2] for c in log), list(d.last_paths)


def mobilenet_rows(d: DspBackend, profile, batch: int = 64) -> list[dict]:
    rows, totals = [], {}

    def row(layer, hook, count, macs, inside, fn):
        packets, critical, paths = measure(d, fn)
        t = totals.setdefault(hook.split("_")[0] + " " + hook.split("_", 1)[1], [0, 0, 0, 0])
        for i, v in enumerate((count * macs, count * inside, count * packets, count * critical)):
            t[i] += v
        rows.append(
            {
                "layer": layer,
                "hook": hook,
                "count": count,
                "macs": macs,
                "inside": inside,
                "packets": packets,
                "critical": critical,
                "macs_per_packet": round(macs / packets, 1),
                "path": paths[0][1] if paths else "",
                "model_us": round(critical / profile.dsp.clock_hz * 1e6, 1),
                "model_us_500mhz": round(critical / SD865_CDSP_HZ * 1e6, 1),
            }
        )

    for hw, c, stride, count in MOBILENET_DW:
        oh = (hw + 2 - 3) // stride + 1
        x, w, err = s8(batch, hw, hw, c), s8(c, 3, 3, 1), s8(batch, oh, oh, c)
        macs, inside = batch * oh * oh * c * 9, batch * c * inside_taps(hw, 3, stride, 1)
        name = f"dw {c} {hw}x{hw} s{stride}"
        row(name, "dw_fwd", count, macs, inside, lambda d: d.dwconv2d_s8(x, w, stride, 1))
        row(name, "dw_bwd_data", count, macs, inside, lambda d: d.dwconv2d_bwd_data_s8(err, w, stride, 1, (hw, hw)))
        row(name, "dw_bwd_weight", count, macs, inside, lambda d: d.dwconv2d_bwd_weight_s8(err, x, stride, 1, (3, 3)))
    for hw, ci, co, count in MOBILENET_PW:
        x, w, err = s8(batch, hw, hw, ci), s8(co, 1, 1, ci), s8(batch, hw, hw, co)
        macs = batch * hw * hw * ci * co
        name = f"pw {ci}->{co} {hw}x{hw}"
        row(name, "pw_fwd", count, macs, macs, lambda d: d.conv2d_s8(x, w, 1, 0))
        row(name, "pw_bwd_data", count, macs, macs, lambda d: d.conv2d_bwd_data_s8(err, w, 1, 0, (hw, hw)))
        row(name, "pw_bwd_weight", count, macs, macs, lambda d: d.conv2d_bwd_weight_s8(err, x, 1, 0, (1, 1)))
    for name, (macs, inside, packets, critical) in totals.items():
        rows.append(
            {
                "layer": "all " + ("depthwise" if name.startswith("dw") else "pointwise"),
                "hook": name.replace(" ", "_"),
                "count": None,
                "macs": macs,
                "inside": inside,
                "packets": packets,
                "critical": critical,
                "macs_per_packet": round(macs / packets, 1),
                "path": "",
                "model_us": round(critical / profile.dsp.clock_hz * 1e6, 1),
                "model_us_500mhz": round(critical / SD865_CDSP_HZ * 1e6, 1),
            }
        )
    return rows


def lenet_step(d: DspBackend, w: dict, x: np.ndarray, step: int):
    """A LeNet-5 shaped NITI step on the DSP; returns the new weights."""
    k = lambda i: RngKey(0, step, i)
    h1, _ = d.conv2d_requant_s8(x, w["c1"], 1, 0, "round", None)
    a1 = d.relu_s8(h1)
    p1, am1 = d.maxpool_s8(a1, 2, 2)
    h2, _ = d.conv2d_requant_s8(p1, w["c2"], 1, 0, "round", None)
    a2 = d.relu_s8(h2)
    p2, am2 = d.maxpool_s8(a2, 2, 2)
    f = p2.reshape(p2.shape[0], -1)
    h3, _ = d.gemm_requant_s8(f, w["f1"], "round", None)
    err = R.integers(-127, 128, h3.shape, dtype=np.int8)
    g3 = d.gemm_s8(np.ascontiguousarray(err.T), np.ascontiguousarray(f.T))
    e2, _ = d.gemm_requant_s8(err, np.ascontiguousarray(w["f1"].T), "sto", k(1))
    e2 = d.maxpool_bwd_s8(e2.reshape(p2.shape), am2, 2, 2, a2.shape[1:3])
    e2 = d.relu_bwd_s8(e2, a2)
    g2 = d.conv2d_bwd_weight_s8(e2, p1, 1, 0, (5, 5))
    e1, _ = d.conv2d_bwd_data_requant_s8(e2, w["c2"], 1, 0, p1.shape[1:3], "sto", k(2))
    e1 = d.relu_bwd_s8(d.maxpool_bwd_s8(e1, am1, 2, 2, a1.shape[1:3]), a1)
    g1 = d.conv2d_bwd_weight_s8(e1, x, 1, 0, (5, 5))
    return {
        "c1": d.niti_update_s8(w["c1"], g1, 3, "psto", None),
        "c2": d.niti_update_s8(w["c2"], g2, 3, "psto", None),
        "f1": d.niti_update_s8(w["f1"], g3.reshape(w["f1"].shape), 3, "psto", None),
    }


def reuse_rows(steps: int, batch: int):
    rows = []
    x = s8(batch, 28, 28, 1)
    for reuse in (True, False):
        d = DspBackend(transport="emulated", reuse=reuse)
        d.transport.start()
        w = {"c1": s8(6, 5, 5, 1), "c2": s8(16, 5, 5, 6), "f1": s8(10, 256)}
        times, moved = [], []
        for step in range(steps):
            b0, t0 = d.bytes_in, time.perf_counter()
            w = lenet_step(d, w, x, step)
            times.append(time.perf_counter() - t0)
            moved.append(d.bytes_in - b0)
        d.close()
        rows.append(
            {
                "reuse": reuse,
                "prepare_ms": times[0] * 1e3,
                "step_ms": float(np.median(times[1:])) * 1e3,
                "prepare_bytes_in": moved[0],
                "step_bytes_in": int(np.median(moved[1:])),
            }
        )
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller GEMM, fewer steps")
    ap.add_argument("--device", default="v66", help="device profile for the modeled time (configs/devices)")
    ap.add_argument("--steps", default="lenet5,vgg11", help="models whose NITI step is modeled ('' for none)")
    ap.add_argument(
        "--only",
        choices=["mobilenet", "steps"],
        help="run only MobileNetV2's convolutions, or only the training steps (--steps)",
    )
    args = ap.parse_args()
    profile = load_device(args.device)
    threads = profile.dsp.hvx_threads
    if args.only == "steps":
        print_steps(step_rows([m for m in args.steps.split(",") if m], profile, 2), profile, args.steps)
        return
    d = DspBackend(transport="emulated", hvx_threads=threads)
    mobile = mobilenet_rows(d, profile)
    print(
        f"MobileNetV2 (32 x 32, batch 64) convolutions on the emulated DSP, {threads} HVX threads; "
        f"modeled on {profile.name} ({profile.dsp.clock_hz / 1e9:g} GHz) and at 500 MHz; load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'layer':22} {'hook':18} {'n':>2} {'MACs':>10} {'inside':>10} {'packets':>10} {'MAC/pkt':>8} "
        f"{'path':16} {'us':>8} {'us@500M':>8}"
    )
    for r in mobile:
        print(
            f"{r['layer']:22} {r['hook']:18} {r['count'] or '':>2} {r['macs']:>10} {r['inside']:>10} "
            f"{r['packets']:>10} {r['macs_per_packet']:>8} {r['path']:16} {r['model_us']:>8} {r['model_us_500mhz']:>8}"
        )
    write_results("dsp_mobilenet", mobile, device=profile.name, hvx_threads=threads, batch=64)
    if args.only == "mobilenet":
        d.close()
        return
    rows = []
    for name, macs, fn in kernels(args.quick):
        fn(d)  # warm: server started, code paths touched
        d.take_cost_log()
        before = list(d.total_thread_packets)
        t0 = time.perf_counter()
        fn(d)
        wall = time.perf_counter() - t0
        log, calls = d.take_cost_log()
        packets, critical = sum(c[1] for c in log), sum(c[2] for c in log)
        shares = [after - b for after, b in zip(d.total_thread_packets[:threads], before)]
        model = dsp_model_time(profile, log, calls)
        rows.append(
            {
                "kernel": name,
                "macs": macs,
                "packets": packets,
                "insns": sum(c[2] for c in d.last_costs),
                "hvx": sum(c[3] for c in d.last_costs),
                "macs_per_packet": round(macs / packets, 1) if macs else None,
                "serial_packets": packets - sum(shares),
                **{f"thread{t}_packets": p for t, p in enumerate(shares)},
                f"critical_{threads}t": critical,
                "macs_per_packet_per_thread": round(macs / threads / critical, 1) if macs else None,
                "model_us": round((model.compute_s + model.memory_s) * 1e6, 1),
                "wall_ms": round(wall * 1e3, 1),
            }
        )
    d.close()
    print(
        f"device profile {profile.name}: {profile.dsp.clock_hz / 1e9:g} GHz, {threads} HVX threads, "
        f"DDR {profile.dsp.bytes_per_s / 1e9:g} GB/s, {profile.dsp.call_s * 1e6:g} us per call; load {os.getloadavg()[0]:.1f}"
    )
    print("packets per HVX thread measured on each worker thread; serial: the calling thread's part")
    print(
        f"{'kernel':26} {'MACs':>10} {'packets':>10} {'MAC/pkt':>8} {'serial':>8} "
        + " ".join(f"{f't{t}':>8}" for t in range(threads))
        + f" {f'crit {threads}t':>10} {'MAC/pkt/thr':>11} {'model us':>9} {'wall ms':>8}"
    )
    for r in rows:
        mpp = f"{r['macs_per_packet']:.1f}" if r["macs_per_packet"] else "-"
        mpt = f"{r['macs_per_packet_per_thread']:.1f}" if r["macs_per_packet_per_thread"] else "-"
        print(
            f"{r['kernel']:26} {r['macs']:>10} {r['packets']:>10} {mpp:>8} {r['serial_packets']:>8} "
            + " ".join(f"{r[f'thread{t}_packets']:>8}" for t in range(threads))
            + f" {r[f'critical_{threads}t']:>10} {mpt:>11} {r['model_us']:>9} {r['wall_ms']:>8}"
        )
    steps = print_steps(step_rows([m for m in args.steps.split(",") if m], profile, 2), profile, args.steps)
    reuse = reuse_rows(4 if args.quick else 8, 16)
    print("\nLeNet-shaped NITI step on the emulated DSP (batch 16), wall time under QEMU:")
    print(f"{'reuse':6} {'prepare ms':>11} {'step ms':>9} {'prepare B in':>13} {'step B in':>10}")
    for r in reuse:
        print(
            f"{str(r['reuse']):6} {r['prepare_ms']:>11.1f} {r['step_ms']:>9.1f} "
            f"{r['prepare_bytes_in']:>13} {r['step_bytes_in']:>10}"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "bench_dsp.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (OUT / "bench_dsp.json").write_text(
        json.dumps({"device": profile.name, "kernels": rows, "steps": steps, "reuse": reuse}, indent=2)
    )
    print(f"\nwritten: {OUT / 'bench_dsp.csv'}, {OUT / 'bench_dsp.json'}")


if __name__ == "__main__":
    main()
