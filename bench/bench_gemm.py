"""int8 GEMM throughput on VGG-11's im2col shapes and MobileNetV2's pointwise (1x1) ones
(batch 64, 32x32 inputs), beside peers.

    python bench/bench_gemm.py [--runs 5] [--isa avx512vnni] [--models vgg11,mobilenet_v2]
                               [--threads N] [--cpu-time]

Columns, all in GOP/s (2 ops per multiply-accumulate), best of --runs:
  dsptrain        gemm_s8(a, b): packs b every call (what a training step pays); a signed,
                  as a backward pass's errors
  dsptrain_relu   the same with a >= 0, as a ReLU's output (the forward's activations):
                  AVX2 runs those A blocks on vpmaddubsw (docs/depthwise.md)
  dsptrain_relu_b a signed, b >= 0, as the weight gradient's (errors x activations):
                  AVX2 runs vpmaddubsw with B unsigned
  dsptrain_small_a a signed within [-64, 64], b signed: backward data's errors x weights
                  where an A block stays within half the range (AVX2: vpmaddubsw with
                  B offset by 128)
  dsptrain_errors a as NITI's backward-data errors: within [-64, 64] but for 0.4 % of the
                  values, spread over the rest of int8 (the most a synthetic NITI VGG-11
                  run showed in any layer's errors: 0-0.37 %); AVX2 runs them as small A
                  with the few outliers added afterwards (docs/depthwise.md)
  dsptrain_pk     gemm_packed(a, pack_weights(b)): weights packed once
  numpy_f32       a @ b.T in float32 (NumPy's BLAS)
  torch_f32       torch.mm in float32
  fbgemm_s8       torch.ops.quantized.linear (fbgemm engine, prepacked int8 weights,
                  uint8 activations, requantized uint8 output)
plus `pack_ms` (packing b alone) and ratios against fbgemm. MobileNetV2's rows are its
distinct 1x1 convolutions (M = batch*H*W, K = in channels, N = out channels; `count` how
many layers share the shape; bench_depthwise.py's list); a `total` row per model gives
the ratio of summed times over its layers (each shape weighted by its count), what a
step pays. --cpu-time times each call by the calling thread's CPU time (1 thread for
both), which a shared machine's other processes disturb less than wall time. Torch is
optional: without it its columns print n/a. Results go to bench/results/bench_gemm.{csv,json},
with the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_depthwise import counted, cpu_best_time, mobilenet_v2_layers  # noqa: E402
from report import best_time, print_table, write_results  # noqa: E402

# (M, K, N) = (batch*OH*OW, KH*KW*C, O) of VGG-11's convolutions at batch 64 on 32x32.
VGG11_SHAPES = [
    (65536, 27, 64),
    (16384, 576, 128),
    (4096, 1152, 256),
    (4096, 2304, 256),
    (1024, 2304, 512),
    (1024, 4608, 512),
]
BATCH = 64


def model_shapes(model: str) -> list[tuple[tuple[int, int, int], int]]:
    """((M, K, N), layers with that shape) of `model`'s int8 GEMMs at batch 64 on 32x32."""
    if model == "vgg11":
        return [(shape, 1) for shape in VGG11_SHAPES]
    return [((BATCH * h * h, cin, cout), count) for (h, cin, cout), count in counted(mobilenet_v2_layers()[1])]


def torch_peers(threads: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    if "fbgemm" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "fbgemm"
    return torch


def fbgemm_linear(torch, a: np.ndarray, b: np.ndarray):
    """A closure running fbgemm's int8 linear on a (as uint8 with zero point 128) and b."""
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return None
    xq = torch.quantize_per_tensor(torch.from_numpy(a.astype(np.float32)), 1.0, 128, torch.quint8)
    wq = torch.quantize_per_tensor(torch.from_numpy(b.astype(np.float32)), 1.0, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(wq, None)
    out_scale = float(a.shape[1] * 127 * 127 / 127)  # keeps the uint8 output in range
    return lambda: torch.ops.quantized.linear(xq, packed, out_scale, 128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="best of this many runs")
    parser.add_argument("--isa", help="force a dsptrain GEMM path (as DSPTRAIN_CPU_ISA)")
    parser.add_argument("--models", default="vgg11,mobilenet_v2", help="comma list of vgg11, mobilenet_v2")
    parser.add_argument("--threads", type=int, help="threads for both (default: the native pool's)")
    parser.add_argument("--cpu-time", action="store_true", help="thread CPU time, 1 thread (a busy machine)")
    args = parser.parse_args()

    from dsptrain import _cpu_ops as native

    if args.isa:
        native.set_isa(args.isa)
    timer = best_time
    if args.cpu_time:
        timer, args.threads = cpu_best_time, 1
        # NumPy's BLAS threads would spin on the calling thread's clock: one thread, as ours
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    if args.threads:
        native.set_threads(args.threads)
    torch = torch_peers(native.threads())
    load_start = os.getloadavg()
    rng = np.random.default_rng(0)
    rows = []
    for model in args.models.split(","):
        model_rows = [
            dict(model=model, count=count, **measure(native, torch, rng, shape, timer, args.runs))
            for shape, count in model_shapes(model)
        ]
        rows += model_rows + [total_row(model, model_rows)]

    print(
        f"int8 GEMM, GOP/s (best of {args.runs}); dsptrain path {native.isa()}, {native.threads()} threads, "
        f"load {load_start[0]:.1f}"
    )
    print_table(
        rows,
        [
            "model",
            "M",
            "K",
            "N",
            "count",
            "dsptrain",
            "dsptrain_relu",
            "dsptrain_relu_b",
            "dsptrain_small_a",
            "dsptrain_errors",
            "dsptrain_pk",
            "pack_ms",
            "numpy_f32",
            "torch_f32",
            "fbgemm_s8",
            "vs_fbgemm",
            "relu_vs_fbgemm",
            "small_a_vs_fbgemm",
            "errors_vs_fbgemm",
            "pk_vs_fbgemm",
            "vs_numpy",
        ],
    )
    meta = {
        "isa": native.isa(),
        "threads": native.threads(),
        "runs": args.runs,
        "timing": "thread CPU time" if args.cpu_time else "wall",
        "torch": getattr(torch, "__version__", None),
        "load_at_start": load_start,
        "load_at_end": os.getloadavg(),
    }
    write_results("bench_gemm", rows, **meta)


def total_row(model: str, rows: list[dict]) -> dict:
    """The model's summed time over its layers (count-weighted), as GOP/s and ratios."""

    def seconds(row, column):
        return row["count"] * 2.0 * row["M"] * row["K"] * row["N"] / row[column] / 1e9

    ops = sum(row["count"] * 2.0 * row["M"] * row["K"] * row["N"] for row in rows)
    total = {"model": model, "M": "total", "count": sum(row["count"] for row in rows)}
    for column in (
        "dsptrain",
        "dsptrain_relu",
        "dsptrain_relu_b",
        "dsptrain_small_a",
        "dsptrain_errors",
        "dsptrain_pk",
        "numpy_f32",
        "torch_f32",
        "fbgemm_s8",
    ):
        ok = all(row[column] for row in rows)
        total[column] = ops / sum(seconds(row, column) for row in rows) / 1e9 if ok else None
    total["vs_fbgemm"] = total["dsptrain"] / total["fbgemm_s8"] if total["fbgemm_s8"] else None
    total["relu_vs_fbgemm"] = total["dsptrain_relu"] / total["fbgemm_s8"] if total["fbgemm_s8"] else None
    total["small_a_vs_fbgemm"] = total["dsptrain_small_a"] / total["fbgemm_s8"] if total["fbgemm_s8"] else None
    total["errors_vs_fbgemm"] = total["dsptrain_errors"] / total["fbgemm_s8"] if total["fbgemm_s8"] else None
    total["pk_vs_fbgemm"] = total["dsptrain_pk"] / total["fbgemm_s8"] if total["fbgemm_s8"] else None
    total["vs_numpy"] = total["dsptrain"] / total["numpy_f32"]
    return total


ERROR_OUTLIER_SHARE = 0.004


def niti_like_errors(rng, m: int, k: int) -> np.ndarray:
    """[m, k] int8 within [-64, 64] but for ERROR_OUTLIER_SHARE of the values, uniform over
    the rest of int8 (-128 .. -65 and 65 .. 127), at random places."""
    a = rng.integers(-64, 65, (m, k), dtype=np.int8)
    beyond = rng.random((m, k)) < ERROR_OUTLIER_SHARE
    magnitude = rng.integers(65, 128, int(beyond.sum()))
    a[beyond] = np.where(rng.random(magnitude.size) < 0.5, -magnitude, magnitude).astype(np.int8)
    return a


def measure(native, torch, rng, shape: tuple[int, int, int], timer, runs: int) -> dict:
    """One shape's row: GOP/s of dsptrain (b packed per call, and prepacked) and the peers."""
    m, k, n = shape
    a = rng.integers(-127, 128, (m, k), dtype=np.int8)
    b = rng.integers(-127, 128, (n, k), dtype=np.int8)
    a_relu, b_relu = np.maximum(a, 0), np.maximum(b, 0)
    a_small = rng.integers(-64, 65, (m, k), dtype=np.int8)
    a_errors = niti_like_errors(rng, m, k)
    ops = 2.0 * m * k * n
    gops = lambda seconds: ops / seconds / 1e9  # noqa: E731
    packed = native.pack_weights(b)
    row = {
        "M": m,
        "K": k,
        "N": n,
        "dsptrain": gops(timer(lambda: native.gemm_s8(a, b), runs)),
        "dsptrain_relu": gops(timer(lambda: native.gemm_s8(a_relu, b), runs)),
        "dsptrain_relu_b": gops(timer(lambda: native.gemm_s8(a, b_relu), runs)),
        "dsptrain_small_a": gops(timer(lambda: native.gemm_s8(a_small, b), runs)),
        "dsptrain_errors": gops(timer(lambda: native.gemm_s8(a_errors, b), runs)),
        "dsptrain_pk": gops(timer(lambda: native.gemm_packed(a, packed), runs)),
        "pack_ms": 1e3 * timer(lambda: native.pack_weights(b), runs),
    }
    af, bf = a.astype(np.float32), b.astype(np.float32)
    row["numpy_f32"] = gops(timer(lambda: af @ bf.T, runs))
    row["torch_f32"] = row["fbgemm_s8"] = None
    if torch is not None:
        at, bt = torch.from_numpy(af), torch.from_numpy(bf)
        row["torch_f32"] = gops(timer(lambda: torch.mm(at, bt.t()), runs))
        fb = fbgemm_linear(torch, a, b)
        if fb is not None:
            row["fbgemm_s8"] = gops(timer(fb, runs))
    row["vs_fbgemm"] = row["dsptrain"] / row["fbgemm_s8"] if row["fbgemm_s8"] else None
    row["relu_vs_fbgemm"] = row["dsptrain_relu"] / row["fbgemm_s8"] if row["fbgemm_s8"] else None
    row["small_a_vs_fbgemm"] = row["dsptrain_small_a"] / row["fbgemm_s8"] if row["fbgemm_s8"] else None
    row["errors_vs_fbgemm"] = row["dsptrain_errors"] / row["fbgemm_s8"] if row["fbgemm_s8"] else None
    row["pk_vs_fbgemm"] = row["dsptrain_pk"] / row["fbgemm_s8"] if row["fbgemm_s8"] else None
    row["vs_numpy"] = row["dsptrain"] / row["numpy_f32"]
    print(f"  {m}x{k}x{n} done", file=sys.stderr)
    return row


if __name__ == "__main__":
    main()
