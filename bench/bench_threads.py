"""One thread or two, per op size: where splitting a product over the native pool pays.

    python bench/bench_threads.py [--runs 7]

Times NITI's int8 products (conv forward, backward data, backward weight, linear) of
LeNet-5 and VGG-11 at batch 64 on the `cpu` backend, with every product threaded
(set_serial_below_macs(0)) at 1 and at 2 threads, and prints the speed-up by op size
(multiply-accumulates) beside PyTorch's float32 op at its own thread count (the peer).
The smallest size from which two threads win on every larger op is the threshold
cpu_ops/thread_pool.h's kDefaultSerialBelowMacs should hold; the table says which it is.
Results: bench/results/threads.{csv,json}.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import best_time, print_table, write_results  # noqa: E402

# (name, N, H, W, C, O, kernel, pad) convolutions and (name, M, K, N) linears, batch 64
CONVS = [
    ("lenet.conv1", 64, 28, 28, 1, 6, 5, 2),
    ("lenet.conv2", 64, 14, 14, 6, 16, 5, 0),
    ("vgg.conv3", 64, 8, 8, 128, 256, 3, 1),
    ("vgg.conv5", 64, 4, 4, 256, 512, 3, 1),
    ("vgg.conv7", 64, 2, 2, 512, 512, 3, 1),
]
LINEARS = [("lenet.fc1", 64, 400, 120), ("lenet.fc2", 64, 120, 84), ("lenet.fc3", 64, 84, 10), ("vgg.fc", 64, 512, 10)]


def ops(rng):
    """(name, macs, fn(native), torch fn or None) for every pass of every layer."""
    from dsptrain import _cpu_ops as n

    out = []
    i8 = lambda *s: rng.integers(-127, 128, s, dtype=np.int8)  # noqa: E731
    for name, b, h, w, c, o, k, p in CONVS:
        x, wt = i8(b, h, w, c), i8(o, k, k, c)
        y = n.conv2d_s8(x, wt, 1, p)
        err = i8(*y.shape)
        macs = int(np.prod(y.shape)) * k * k * c
        out += [
            (f"{name}.fwd", macs, lambda x=x, wt=wt, p=p: n.conv2d_s8(x, wt, 1, p)),
            (f"{name}.bwd_data", macs, lambda e=err, wt=wt, p=p, hw=(h, w): n.conv2d_bwd_data_s8(e, wt, 1, p, hw)),
            (f"{name}.bwd_weight", macs, lambda e=err, x=x, p=p, k=k: n.conv2d_bwd_weight_s8(e, x, 1, p, (k, k))),
        ]
    for name, m, k, nn in LINEARS:
        a, wt, err = i8(m, k), i8(nn, k), i8(m, nn)
        out += [
            (f"{name}.fwd", m * k * nn, lambda a=a, wt=wt: n.gemm_s8(a, wt)),
            (f"{name}.bwd_data", m * k * nn, lambda e=err, wt=np.ascontiguousarray(wt.T): n.gemm_s8(e, wt)),
            (
                f"{name}.bwd_weight",
                m * k * nn,
                lambda e=np.ascontiguousarray(err.T), a=np.ascontiguousarray(a.T): n.gemm_s8(e, a),
            ),
        ]
    return out


def torch_time(name, runs):
    """PyTorch float32 forward of the same layer at its default threads (the peer), seconds."""
    try:
        import torch
    except ImportError:
        return None
    layer = name.rsplit(".", 1)[0]
    for cname, b, h, w, c, o, k, p in CONVS:
        if cname == layer:
            x, conv = torch.randn(b, c, h, w), torch.nn.Conv2d(c, o, k, padding=p, bias=False)
            with torch.no_grad():
                return best_time(lambda: conv(x), runs)
    for lname, m, k, nn in LINEARS:
        if lname == layer:
            x, lin = torch.randn(m, k), torch.nn.Linear(k, nn, bias=False)
            with torch.no_grad():
                return best_time(lambda: lin(x), runs)
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    from dsptrain import _cpu_ops as n

    load = os.getloadavg()
    default = n.serial_below_macs()
    n.set_serial_below_macs(0.0)
    rows = []
    try:
        for name, macs, fn in ops(np.random.default_rng(0)):
            times = {}
            for threads in (1, 2):
                n.set_threads(threads)
                times[threads] = best_time(fn, args.runs)
            n.set_threads(64)
            rows.append(
                {
                    "op": name,
                    "MACs": macs,
                    "1 thread ms": 1e3 * times[1],
                    "2 threads ms": 1e3 * times[2],
                    "2 vs 1": times[1] / times[2],
                    "torch f32 fwd ms": None
                    if not name.endswith(".fwd")
                    else (lambda t: None if t is None else 1e3 * t)(torch_time(name, args.runs)),
                }
            )
    finally:
        n.set_serial_below_macs(default)
        n.set_threads(64)
    rows.sort(key=lambda r: r["MACs"])
    wins = [r["2 vs 1"] > 1.05 for r in rows]
    threshold = next((rows[i]["MACs"] for i in range(len(rows)) if all(wins[i:])), None)
    print_table(rows, title=f"products at 1 and 2 threads, every one threaded (load {load[0]:.1f} {load[1]:.1f})")
    print(f"two threads win (>5 %) on every op from {threshold} MACs up; the built-in threshold is {default:.3g}")
    write_results("threads", rows, load=load, threshold_macs=threshold, built_in_threshold=default)
    return 0


if __name__ == "__main__":
    sys.exit(main())
