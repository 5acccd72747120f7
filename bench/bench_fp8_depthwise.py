"""FP8's depthwise convolution on the CPU: its own kernels (cpu_ops/dwconv_fp16.cpp: each
output's FP16 products chunked over its own taps or pixels) beside the dense product the recipe
ran before (matmul_fp16_chunked on the weight zero-filled outside each channel), on MobileNetV2's
3x3 depthwise shapes at batch 32 (32x32 input), in the same process.

    python bench/bench_fp8_depthwise.py [--runs 5] [--batch 32]

Milliseconds per call (best of --runs): `*_dense` the old path (fp8.chunked_product on
_branch_layers.dense_weight; the weight gradient's diagonal taken after), `*_dw` the depthwise
hooks; `speedup` the three dense passes' sum over the three depthwise ones. Backward data gives the
same bits both ways (checked here); the forward and weight gradient the same bits when C >= 64.
Results: bench/results/bench_fp8_depthwise.{csv,json}.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import best_time, print_table, write_results  # noqa: E402

# MobileNetV2's depthwise layers on a 32x32 input (torchvision, width 1.0): (H, C, stride)
SHAPES = [(16, 32, 1), (16, 96, 2), (8, 144, 1), (8, 144, 2), (4, 192, 1), (4, 384, 1), (2, 576, 1), (2, 960, 1)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    from dsptrain import float_ops
    from dsptrain.algorithms import fp8
    from dsptrain.algorithms._branch_layers import dense_weight, grouped_part
    from dsptrain.backends.ops_cpu import CpuBackend

    cpu, rng = CpuBackend(), np.random.default_rng(0)

    def fp8_values(shape):
        return float_ops.round_float(rng.standard_normal(shape), 5, 2, "nearest_even", None).astype(np.float32)

    rows = []
    for h, c, s in SHAPES:
        n, oh = args.batch, (h + 2 - 3) // s + 1
        x, w, err = fp8_values((n, h, h, c)), fp8_values((c, 3, 3, 1)), fp8_values((n, oh, oh, c))
        dense, plain = dense_weight(w, c, 1), dict(conv=True, stride=s, pad=1, in_hw=(h, h), kernel=(3, 3))
        calls = {
            "fwd_dense": lambda: fp8.chunked_product(cpu, "fwd", x, dense, plain, 64),
            "fwd_dw": lambda: cpu.dwconv2d_fp16_chunked(x, w, s, 1, 64, True),
            "bwd_data_dense": lambda: fp8.chunked_product(cpu, "bwd_data", err, dense, plain, 64),
            "bwd_data_dw": lambda: cpu.dwconv2d_bwd_data_fp16(err, w, s, 1, (h, h)),
            "wgrad_dense": lambda: grouped_part(fp8.chunked_product(cpu, "bwd_weight", err, x, plain, 64), c, 1),
            "wgrad_dw": lambda: cpu.dwconv2d_bwd_weight_fp16_chunked(err, x, s, 1, (3, 3), 64, True),
        }
        np.testing.assert_array_equal(calls["bwd_data_dense"](), calls["bwd_data_dw"]())
        row = {"shape": f"{h}x{h}x{c} s{s}", "batch": n}
        row.update({k: best_time(f, args.runs) * 1e3 for k, f in calls.items()})
        dense_ms = row["fwd_dense"] + row["bwd_data_dense"] + row["wgrad_dense"]
        row["speedup"] = dense_ms / (row["fwd_dw"] + row["bwd_data_dw"] + row["wgrad_dw"])
        rows.append(row)
        print_table([row])
    print_table(rows, title="FP8 depthwise, ms per call")
    write_results("bench_fp8_depthwise", rows, isa=cpu.isa)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
