"""DSP kernels under the emulator: int8 MACs per packet, and subgraph reuse.

    python bench/bench_dsp.py [--quick]

Per kernel: packets, instructions and HVX instructions from QEMU's counters
(c20/c21/c22) and MACs per packet (ideal for one HVX thread: 128, one vrmpy per
packet). Then a LeNet-sized step (conv/relu/pool/fc forward + backward + update) run
repeatedly with subgraph reuse on and off: the first (prepare) step vs the steady
step, wall time under QEMU. Table on stdout, CSV and JSON in bench/results/.
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from dsptrain.backends.ops_dsp import DspBackend
from dsptrain.numerics import RngKey

R = np.random.default_rng(0)
OUT = Path(__file__).resolve().parent / "results"


def s8(*shape):
    return R.integers(-127, 128, shape, dtype=np.int8)


def kernels(quick: bool):
    g = 128 if quick else 256
    rng = RngKey(1, 2, 3)
    yield "gemm 128-mult", g * g * g, lambda d: d.gemm_s8(s8(g, g), s8(g, g))
    yield "gemm ragged", 100 * 70 * 131, lambda d: d.gemm_s8(s8(100, 131), s8(70, 131))
    yield "conv fwd 3x3 32->32", 4 * 16 * 16 * 32 * 9 * 32, \
        lambda d: d.conv2d_s8(s8(4, 16, 16, 32), s8(32, 3, 3, 32), 1, 1)
    yield "conv bwd data", 4 * 16 * 16 * 32 * 9 * 32, \
        lambda d: d.conv2d_bwd_data_s8(s8(4, 16, 16, 32), s8(32, 3, 3, 32), 1, 1, (16, 16))
    yield "conv bwd weight", 4 * 16 * 16 * 32 * 9 * 32, \
        lambda d: d.conv2d_bwd_weight_s8(s8(4, 16, 16, 32), s8(4, 16, 16, 32), 1, 1, (3, 3))
    yield "lenet conv1 fwd", 32 * 24 * 24 * 25 * 6, lambda d: d.conv2d_s8(s8(32, 28, 28, 1), s8(6, 5, 5, 1), 1, 0)
    acc = R.integers(-2**20, 2**20, 32768, dtype=np.int32)
    for mode in ("round", "psto", "sto"):
        yield f"requant {mode} (32K)", 0, lambda d, m=mode: d.requantize(acc, m, rng)
    yield "relu (32K)", 0, lambda d: d.relu_s8(s8(32768))
    yield "maxpool 2x2 C=128", 0, lambda d: d.maxpool_s8(s8(2, 16, 16, 128), 2, 2)


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
    return {"c1": d.niti_update_s8(w["c1"], g1, 3, "psto", None),
            "c2": d.niti_update_s8(w["c2"], g2, 3, "psto", None),
            "f1": d.niti_update_s8(w["f1"], g3.reshape(w["f1"].shape), 3, "psto", None)}


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
        rows.append({"reuse": reuse, "prepare_ms": times[0] * 1e3,
                     "step_ms": float(np.median(times[1:])) * 1e3,
                     "prepare_bytes_in": moved[0], "step_bytes_in": int(np.median(moved[1:]))})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller GEMM, fewer steps")
    args = ap.parse_args()
    d = DspBackend(transport="emulated")
    rows = []
    for name, macs, fn in kernels(args.quick):
        fn(d)  # warm: server started, code paths touched
        t0 = time.perf_counter()
        fn(d)
        wall = time.perf_counter() - t0
        packets = sum(c[1] for c in d.last_costs)
        rows.append({"kernel": name, "macs": macs, "packets": packets,
                     "insns": sum(c[2] for c in d.last_costs), "hvx": sum(c[3] for c in d.last_costs),
                     "macs_per_packet": round(macs / packets, 1) if macs else None,
                     "wall_ms": round(wall * 1e3, 1)})
    d.close()
    print(f"{'kernel':24} {'MACs':>10} {'packets':>10} {'insns':>10} {'HVX':>9} {'MAC/pkt':>8} {'wall ms':>8}")
    for r in rows:
        mpp = f"{r['macs_per_packet']:.1f}" if r["macs_per_packet"] else "-"
        print(f"{r['kernel']:24} {r['macs']:>10} {r['packets']:>10} {r['insns']:>10} {r['hvx']:>9} "
              f"{mpp:>8} {r['wall_ms']:>8}")
    reuse = reuse_rows(4 if args.quick else 8, 16)
    print("\nLeNet-shaped NITI step on the emulated DSP (batch 16), wall time under QEMU:")
    print(f"{'reuse':6} {'prepare ms':>11} {'step ms':>9} {'prepare B in':>13} {'step B in':>10}")
    for r in reuse:
        print(f"{str(r['reuse']):6} {r['prepare_ms']:>11.1f} {r['step_ms']:>9.1f} "
              f"{r['prepare_bytes_in']:>13} {r['step_bytes_in']:>10}")
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "bench_dsp.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (OUT / "bench_dsp.json").write_text(json.dumps({"kernels": rows, "reuse": reuse}, indent=2))
    print(f"\nwritten: {OUT / 'bench_dsp.csv'}, {OUT / 'bench_dsp.json'}")


if __name__ == "__main__":
    main()
