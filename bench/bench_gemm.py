"""int8 GEMM throughput on VGG-11 im2col shapes (batch 64, 32x32 inputs), beside peers.

    python bench/bench_gemm.py [--runs 5] [--isa avx512vnni]

Columns, all in GOP/s (2 ops per multiply-accumulate), best of --runs:
  dsptrain        gemm_s8(a, b): packs b every call (what a training step pays)
  dsptrain_pk     gemm_packed(a, pack_weights(b)): weights packed once
  numpy_f32       a @ b.T in float32 (NumPy's BLAS)
  torch_f32       torch.mm in float32
  fbgemm_s8       torch.ops.quantized.linear (fbgemm engine, prepacked int8 weights,
                  uint8 activations, requantized uint8 output)
plus `pack_ms` (packing b alone) and ratios against fbgemm. Torch is optional: without
it its columns print n/a. Results go to bench/results/bench_gemm.{csv,json}.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import best_time, print_table, write_results  # noqa: E402

# (M, K, N) = (batch*OH*OW, KH*KW*C, O) of VGG-11's convolutions at batch 64 on 32x32.
SHAPES = [(65536, 27, 64), (16384, 576, 128), (4096, 1152, 256), (4096, 2304, 256),
          (1024, 2304, 512), (1024, 4608, 512)]


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
    args = parser.parse_args()

    from dsptrain import _cpu_ops as native
    if args.isa:
        native.set_isa(args.isa)
    torch = torch_peers(native.threads())
    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in SHAPES:
        a = rng.integers(-127, 128, (m, k), dtype=np.int8)
        b = rng.integers(-127, 128, (n, k), dtype=np.int8)
        ops = 2.0 * m * k * n
        gops = lambda seconds: ops / seconds / 1e9  # noqa: E731
        packed = native.pack_weights(b)
        row = {"M": m, "K": k, "N": n,
               "dsptrain": gops(best_time(lambda: native.gemm_s8(a, b), args.runs)),
               "dsptrain_pk": gops(best_time(lambda: native.gemm_packed(a, packed), args.runs)),
               "pack_ms": 1e3 * best_time(lambda: native.pack_weights(b), args.runs)}
        af, bf = a.astype(np.float32), b.astype(np.float32)
        row["numpy_f32"] = gops(best_time(lambda: af @ bf.T, args.runs))
        row["torch_f32"] = row["fbgemm_s8"] = None
        if torch is not None:
            at, bt = torch.from_numpy(af), torch.from_numpy(bf)
            row["torch_f32"] = gops(best_time(lambda: torch.mm(at, bt.t()), args.runs))
            fb = fbgemm_linear(torch, a, b)
            if fb is not None:
                row["fbgemm_s8"] = gops(best_time(fb, args.runs))
        row["vs_fbgemm"] = row["dsptrain"] / row["fbgemm_s8"] if row["fbgemm_s8"] else None
        row["pk_vs_fbgemm"] = row["dsptrain_pk"] / row["fbgemm_s8"] if row["fbgemm_s8"] else None
        row["vs_numpy"] = row["dsptrain"] / row["numpy_f32"]
        rows.append(row)
        print(f"  {m}x{k}x{n} done", file=sys.stderr)

    print(f"int8 GEMM, GOP/s (best of {args.runs}); dsptrain path {native.isa()}, {native.threads()} threads")
    print_table(rows, ["M", "K", "N", "dsptrain", "dsptrain_pk", "pack_ms", "numpy_f32", "torch_f32", "fbgemm_s8",
                       "vs_fbgemm", "pk_vs_fbgemm", "vs_numpy"])
    meta = {"isa": native.isa(), "threads": native.threads(), "runs": args.runs,
            "torch": getattr(torch, "__version__", None)}
    write_results("bench_gemm", rows, **meta)


if __name__ == "__main__":
    main()
