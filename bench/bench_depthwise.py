"""Depthwise and pointwise convolutions of MobileNetV2 (torchvision's definition, width 1.0,
32x32x3 input, batch 64) on the CPU: dsptrain's int8 and float32 kernels beside PyTorch's
float32 convolution (oneDNN / its native depthwise kernel, the faster of NCHW and
channels-last) on the same shapes, in the same process.

    python bench/bench_depthwise.py [--runs 5] [--batch 64] [--threads N] [--cpu-time]

--cpu-time times each call by its thread's CPU time (time.thread_time, minimum of
--runs x 5 calls) at one thread for both systems: on a shared, loaded machine this leaves out
the time the call waited for a core, which wall-clock best-of-runs cannot (PyTorch's OpenMP
workers wait for each other at every barrier when the cores are oversubscribed).

Depthwise table, milliseconds per call (best of --runs), per distinct layer shape (`count`
layers of the network have it; the `network` row sums shape x count):
  s8_fwd, s8_bwd_data   dwconv2d_requant_s8 / dwconv2d_bwd_data_requant_s8 (the NITI step's
                        calls: sums, range estimate, rounding to int8)
  s8_wgrad              dwconv2d_bwd_weight_s8
  f32_*                 dwconv2d_f32 and its two backward passes
  torch_*               F.conv2d(groups=C) and aten.convolution_backward (input, weight)
  vs_torch              torch's three passes over dsptrain int8's three (> 1: dsptrain faster)
Pointwise table: the 1x1 convolutions as conv2d_requant_s8 (`s8_fwd`: the GEMM on x in
place, then requantized) and gemm_s8 (`s8_gemm`: the bare int8 GEMM, weights packed every
call as a training step must) beside torch's float32 1x1 convolution and fbgemm's int8
linear (weights prepacked once) on the same (M, K, N); gemm_vs_fbgemm = fbgemm's time over
s8_gemm's, vs_torch = torch's over s8_fwd's (> 1: dsptrain faster).
Results: bench/results/bench_depthwise.{csv,json}, bench_pointwise.{csv,json}. Grouped convolutions:
bench/bench_grouped.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import best_time, print_table, write_results  # noqa: E402

# torchvision's MobileNetV2 (Sandler et al. 2018, torchvision/models/mobilenetv2.py): a 3x3
# stride-2 stem to 32 channels, then inverted residual blocks (t, c, n, s): expand by t
# (1x1), a 3x3 depthwise (stride s on a stage's first block), project to c (1x1).
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
LAST_CHANNELS = 1280


def cpu_best_time(fn, runs: int = 5) -> float:
    """Least CPU time of the calling thread over runs x 5 calls of fn (after one warm-up)."""
    fn()
    best = float("inf")
    for _ in range(runs * 5):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def mobilenet_v2_layers(size: int = 32):
    """(depthwise [(C, H, stride)], pointwise [(H, Cin, Cout)]) of every layer, in order."""
    depthwise, pointwise = [], []
    h, cin = (size + 2 - 3) // 2 + 1, 32  # the stem
    for t, c, n, s in SETTINGS:
        for i in range(n):
            stride, hidden = (s if i == 0 else 1), cin * t
            if t != 1:
                pointwise.append((h, cin, hidden))
            depthwise.append((hidden, h, stride))
            h = (h + 2 - 3) // stride + 1
            pointwise.append((h, hidden, c))
            cin = c
    pointwise.append((h, cin, LAST_CHANNELS))
    return depthwise, pointwise


def counted(items):
    out = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return list(out.items())


def torch_peer(threads: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    if "fbgemm" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "fbgemm"
    return torch


def torch_conv(torch, x, w, err, stride, pad, dilation, groups, runs, timer):
    """Best ms of F.conv2d(groups=) and its two gradients, NCHW or channels-last, whichever is faster."""
    best = None
    for memory_format in (torch.contiguous_format, torch.channels_last):
        xt, wt, et = (
            torch.from_numpy(np.moveaxis(a.astype(np.float32), 3, 1).copy()).contiguous(memory_format=memory_format)
            for a in (x, w, err)
        )

        def fwd():
            return torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad, dilation=dilation, groups=groups)

        def backward(mask):
            s, p, d = [stride] * 2, [pad] * 2, [dilation] * 2
            return lambda: torch.ops.aten.convolution_backward(et, xt, wt, None, s, p, d, False, [0, 0], groups, mask)

        with torch.no_grad():
            times = tuple(
                1e3 * timer(fn, runs) for fn in (fwd, backward([True, False, False]), backward([False, True, False]))
            )
        if best is None or sum(times) < sum(best):
            best = times
    return best


def torch_depthwise(torch, x, w, err, stride, runs, timer):
    """torch_conv of a 3x3 depthwise conv (groups = channels, padding 1)."""
    return torch_conv(torch, x, w, err, stride, 1, 1, x.shape[3], runs, timer)


def depthwise_rows(native, torch, batch, runs, timer):
    rng = np.random.default_rng(0)
    rows = []
    depthwise, _ = mobilenet_v2_layers()
    for (c, h, stride), count in counted(depthwise):
        x = rng.integers(-127, 128, (batch, h, h, c), dtype=np.int8)
        w = rng.integers(-127, 128, (c, 3, 3, 1), dtype=np.int8)
        oh = (h + 2 - 3) // stride + 1
        err = rng.integers(-127, 128, (batch, oh, oh, c), dtype=np.int8)
        xf, wf, ef = (rng.standard_normal(a.shape).astype(np.float32) for a in (x, w, err))
        ms = lambda fn: 1e3 * timer(fn, runs)  # noqa: E731
        row = {
            "C": c,
            "H": h,
            "stride": stride,
            "count": count,
            "path": native.dwconv_path("forward", [batch, h, h, c, 3, 3, stride, 1]),
            "s8_fwd": ms(lambda: native.dwconv2d_requant_s8(x, w, stride, 1, -1, "round", None)),
            "s8_bwd_data": ms(
                lambda: native.dwconv2d_bwd_data_requant_s8(err, w, stride, 1, (h, h), -1, "round", None)
            ),
            "s8_wgrad": ms(lambda: native.dwconv2d_bwd_weight_s8(err, x, stride, 1, (3, 3))),
            "f32_fwd": ms(lambda: native.dwconv2d_f32(xf, wf, stride, 1)),
            "f32_bwd_data": ms(lambda: native.dwconv2d_bwd_data_f32(ef, wf, stride, 1, (h, h))),
            "f32_wgrad": ms(lambda: native.dwconv2d_bwd_weight_f32(ef, xf, stride, 1, (3, 3))),
        }
        row["torch_fwd"] = row["torch_bwd_data"] = row["torch_wgrad"] = None
        if torch is not None:
            row["torch_fwd"], row["torch_bwd_data"], row["torch_wgrad"] = torch_depthwise(
                torch, xf, wf, ef, stride, runs, timer
            )
        rows.append(row)
        print(f"  depthwise {c}x{h}x{h} stride {stride} done", file=sys.stderr)
    total = {"C": "network", "count": sum(r["count"] for r in rows)}
    for key in rows[0]:
        if key.startswith(("s8_", "f32_", "torch_")):
            values = [r[key] for r in rows]
            total[key] = None if None in values else sum(v * r["count"] for v, r in zip(values, rows))
    rows.append(total)
    for r in rows:
        s8 = r["s8_fwd"] + r["s8_bwd_data"] + r["s8_wgrad"]
        f32 = r["f32_fwd"] + r["f32_bwd_data"] + r["f32_wgrad"]
        peer = None if r["torch_fwd"] is None else r["torch_fwd"] + r["torch_bwd_data"] + r["torch_wgrad"]
        r["vs_torch"] = None if peer is None else peer / s8
        r["f32_vs_torch"] = None if peer is None else peer / f32
    return rows


def fbgemm_linear(torch, a, b):
    xq = torch.quantize_per_tensor(torch.from_numpy(a.astype(np.float32)), 1.0, 128, torch.quint8)
    wq = torch.quantize_per_tensor(torch.from_numpy(b.astype(np.float32)), 1.0, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(wq, None)
    return lambda: torch.ops.quantized.linear(xq, packed, float(a.shape[1] * 127), 128)


def pointwise_rows(native, torch, batch, runs, timer):
    rng = np.random.default_rng(1)
    rows = []
    _, pointwise = mobilenet_v2_layers()
    for (h, cin, cout), count in counted(pointwise):
        x = rng.integers(-127, 128, (batch, h, h, cin), dtype=np.int8)
        w = rng.integers(-127, 128, (cout, 1, 1, cin), dtype=np.int8)
        m = batch * h * h
        ms = lambda fn: 1e3 * timer(fn, runs)  # noqa: E731
        row = {
            "M": m,
            "K": cin,
            "N": cout,
            "count": count,
            "path": native.conv_algorithm("forward", x, w, 1, 0),
            "s8_fwd": ms(lambda: native.conv2d_requant_s8(x, w, 1, 0, -1, "round", None)),
            "s8_gemm": ms(lambda: native.gemm_s8(x.reshape(m, cin), w.reshape(cout, cin))),
        }
        row["torch_f32"] = row["fbgemm_s8"] = None
        if torch is not None:
            xt = torch.from_numpy(np.moveaxis(x.astype(np.float32), 3, 1).copy()).contiguous(
                memory_format=torch.channels_last
            )
            wt = torch.from_numpy(np.moveaxis(w.astype(np.float32), 3, 1).copy())
            with torch.no_grad():
                row["torch_f32"] = ms(lambda: torch.nn.functional.conv2d(xt, wt))
            if "fbgemm" in torch.backends.quantized.supported_engines:
                row["fbgemm_s8"] = ms(fbgemm_linear(torch, x.reshape(m, cin), w.reshape(cout, cin)))
        row["gemm_vs_fbgemm"] = row["fbgemm_s8"] / row["s8_gemm"] if row["fbgemm_s8"] else None
        row["vs_torch"] = row["torch_f32"] / row["s8_fwd"] if row["torch_f32"] else None
        rows.append(row)
        print(f"  pointwise {m}x{cin}x{cout} done", file=sys.stderr)
    return rows


# (H, C, O, K, groups): ShuffleNet-like grouped 1x1 convs and ResNeXt-like grouped 3x3 ones
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="best of this many runs")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, help="threads for both (default: the native pool's)")
    parser.add_argument("--isa", help="force a dsptrain path (as DSPTRAIN_CPU_ISA)")
    parser.add_argument("--cpu-time", action="store_true", help="time by thread CPU time, one thread each")
    args = parser.parse_args()

    from dsptrain import _cpu_ops as native

    if args.isa:
        native.set_isa(args.isa)
    timer = best_time
    if args.cpu_time:
        timer, args.threads = cpu_best_time, 1
    if args.threads:
        native.set_threads(args.threads)
    torch = torch_peer(native.threads())
    meta = {
        "isa": native.isa(),
        "threads": native.threads(),
        "runs": args.runs,
        "batch": args.batch,
        "timing": "thread CPU time" if args.cpu_time else "wall clock",
        "torch": getattr(torch, "__version__", None),
    }

    rows = depthwise_rows(native, torch, args.batch, args.runs, timer)
    print(
        f"MobileNetV2 depthwise 3x3, batch {args.batch}, ms per call ({meta['timing']}, best of {args.runs}); "
        f"dsptrain {native.isa()}, {native.threads()} threads"
    )
    print_table(
        rows,
        [
            "C",
            "H",
            "stride",
            "count",
            "path",
            "s8_fwd",
            "s8_bwd_data",
            "s8_wgrad",
            "f32_fwd",
            "f32_bwd_data",
            "f32_wgrad",
            "torch_fwd",
            "torch_bwd_data",
            "torch_wgrad",
            "vs_torch",
            "f32_vs_torch",
        ],
    )
    write_results("bench_depthwise", rows, **meta)

    rows = pointwise_rows(native, torch, args.batch, args.runs, timer)
    print(f"MobileNetV2 pointwise 1x1, batch {args.batch}, ms per call (best of {args.runs})")
    print_table(
        rows,
        ["M", "K", "N", "count", "path", "s8_fwd", "s8_gemm", "torch_f32", "fbgemm_s8", "gemm_vs_fbgemm", "vs_torch"],
    )
    write_results("bench_pointwise", rows, **meta)


if __name__ == "__main__":
    main()
