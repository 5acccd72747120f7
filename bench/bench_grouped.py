"""Grouped convolutions (groups 2-8, ResNeXt / ShuffleNetV1-style grouped 1x1 and 3x3, dilated
depthwise and dilated grouped 3x3) on the CPU: NITI's three passes as the CpuBackend runs them
(cpu_ops/conv_grouped.cpp: one native call a pass, each group's patches gathered from its channels
into the int8 GEMM and its sums written into its channels; a depthwise conv on the depthwise
kernels, by polyphase decomposition when dilated) beside the per-group products composed in
Python (grouped_hooks.py's route, still the DSP's), one product on the block-diagonal weight, and
PyTorch's float32 grouped convolution (F.conv2d(groups=...), the faster of NCHW and channels-last)
on the same shapes, in the same process.

    python bench/bench_grouped.py [--runs 5] [--batch 64] [--threads N] [--cpu-time]

Milliseconds per call (best of --runs), per shape:
  niti_fwd, niti_bwd_data   conv2d_grouped_requant_s8 / conv2d_grouped_bwd_data_requant_s8
                            (sums, range estimate, rounding to int8: the NITI step's calls)
  niti_wgrad                conv2d_grouped_bwd_weight_s8
  py_*                      the same three passes as grouped_hooks.py composes them from the backend's
                            dense conv hooks: a channel slice, a call and a join per group
                            (None on a depthwise conv, whose route is the same either way)
  alt_*                     the same three passes as one dense product on the block-diagonal weight
                            (zero outside each group's block: groups x the MACs, no slicing copies)
  py_over_niti              the Python composition's three passes over NITI's (> 1: native faster)
  torch_*                   F.conv2d(groups) and aten.convolution_backward (input, weight)
  alt_over_niti             the alternative's three passes over NITI's (> 1: the chosen path is faster)
  vs_torch                  torch's three passes over NITI's (> 1: dsptrain faster)
Dilated table: a dense dilated conv's three passes with its patches gathered by NumPy (base.py's
composition: `numpy_*`) and natively (cpu_ops/dilated_gather.cpp, the CpuBackend's: `native_*`),
both into the same native GEMM; native_speedup = numpy's three over native's.
--cpu-time times each call by its thread's CPU time at one thread for both systems (see
bench_depthwise.py). Results: bench/results/bench_grouped.{csv,json}, bench_dilated_gather.{csv,json}.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_depthwise import cpu_best_time, torch_conv, torch_peer  # noqa: E402
from dsptrain.backends.grouped_hooks import GroupedHooks, is_depthwise  # noqa: E402
from report import best_time, print_table, write_results  # noqa: E402

# (H, C, O, kernel, groups, stride, dilation): ShuffleNetV1's grouped 1x1 (240 channels, groups 2-8),
# ResNeXt-style grouped 3x3 (stride 1 and 2), DeepLab-style dilated depthwise and dilated grouped 3x3
SHAPES = [
    (8, 240, 240, 1, 2, 1, 1),
    (8, 240, 240, 1, 3, 1, 1),
    (8, 240, 240, 1, 8, 1, 1),
    (8, 128, 128, 3, 2, 1, 1),
    (8, 128, 128, 3, 4, 1, 1),
    (8, 128, 128, 3, 8, 1, 1),
    (16, 64, 64, 3, 8, 2, 1),
    (16, 96, 96, 3, 96, 1, 2),
    (8, 192, 192, 3, 192, 1, 2),
    (16, 64, 64, 3, 4, 1, 2),
]


def block_diagonal(w, groups):
    o, k, _, cg = w.shape
    og = o // groups
    dense = np.zeros((o, k, k, cg * groups), np.int8)
    for g in range(groups):
        dense[g * og : (g + 1) * og, ..., g * cg : (g + 1) * cg] = w[g * og : (g + 1) * og]
    return dense


def diagonal_blocks(grad, groups):
    o, c = grad.shape[0], grad.shape[-1]
    og, cg = o // groups, c // groups
    return np.concatenate([grad[g * og : (g + 1) * og, ..., g * cg : (g + 1) * cg] for g in range(groups)])


def rows_for(cpu, torch, batch, runs, timer):
    rng = np.random.default_rng(2)
    rows = []
    for h, c, o, k, groups, stride, dilation in SHAPES:
        pad = (k // 2) * dilation
        x = rng.integers(-127, 128, (batch, h, h, c), dtype=np.int8)
        w = rng.integers(-127, 128, (o, k, k, c // groups), dtype=np.int8)
        oh = (h + 2 * pad - (k - 1) * dilation - 1) // stride + 1
        err = rng.integers(-127, 128, (batch, oh, oh, o), dtype=np.int8)
        dense = block_diagonal(w, groups)
        a = (stride, pad, dilation)
        alt = (
            lambda: cpu.conv2d_dilated_requant_s8(x, dense, *a, "round", None),
            lambda: cpu.conv2d_dilated_bwd_data_requant_s8(err, dense, *a, (h, h), "round", None),
            lambda: diagonal_blocks(cpu.conv2d_dilated_bwd_weight_s8(err, x, *a, (k, k)), groups),
        )
        niti = (
            lambda: cpu.conv2d_grouped_requant_s8(x, w, *a, groups, "round", None),
            lambda: cpu.conv2d_grouped_bwd_data_requant_s8(err, w, *a, groups, (h, h), "round", None),
            lambda: cpu.conv2d_grouped_bwd_weight_s8(err, x, *a, groups, (k, k)),
        )
        composed = (  # GroupedHooks' own methods, so no call reaches the CpuBackend's native overrides
            lambda: cpu.requantize(GroupedHooks.conv2d_grouped_s8(cpu, x, w, *a, groups), "round", None),
            lambda: cpu.requantize(
                GroupedHooks.conv2d_grouped_bwd_data_s8(cpu, err, w, *a, groups, (h, h)), "round", None
            ),
            lambda: GroupedHooks.conv2d_grouped_bwd_weight_s8(cpu, err, x, *a, groups, (k, k)),
        )
        for mine, *theirs in zip(niti, alt, composed):  # the same bits every way, or comparing means nothing
            got = mine()
            for other in theirs:
                want = other()
                assert (
                    all(np.array_equal(g, t) for g, t in zip(got, want))
                    if isinstance(got, tuple)
                    else (np.array_equal(got, want))
                )
        ms = lambda fn: 1e3 * timer(fn, runs)  # noqa: E731
        row = {"H": h, "C": c, "O": o, "K": k, "groups": groups, "stride": stride, "dilation": dilation}
        row.update(zip(("niti_fwd", "niti_bwd_data", "niti_wgrad"), map(ms, niti)))
        ours = row["niti_fwd"] + row["niti_bwd_data"] + row["niti_wgrad"]
        row["py_fwd"] = row["py_bwd_data"] = row["py_wgrad"] = row["py_over_niti"] = None
        if not is_depthwise(c, o, groups):
            row.update(zip(("py_fwd", "py_bwd_data", "py_wgrad"), map(ms, composed)))
            row["py_over_niti"] = (row["py_fwd"] + row["py_bwd_data"] + row["py_wgrad"]) / ours
        row.update(zip(("alt_fwd", "alt_bwd_data", "alt_wgrad"), map(ms, alt)))
        row["alt_over_niti"] = (row["alt_fwd"] + row["alt_bwd_data"] + row["alt_wgrad"]) / ours
        row["torch_fwd"] = row["torch_bwd_data"] = row["torch_wgrad"] = row["vs_torch"] = None
        if torch is not None:
            peer = torch_conv(torch, x, w, err, stride, pad, dilation, groups, runs, timer)
            row["torch_fwd"], row["torch_bwd_data"], row["torch_wgrad"] = peer
            row["vs_torch"] = sum(peer) / ours
        rows.append(row)
        print(f"  {c}x{h}x{h} k{k} groups {groups} stride {stride} dilation {dilation} done", file=sys.stderr)
    return rows


# (H, C, O, stride, dilation): DeepLab-style 3x3 dilated convs (padding = dilation)
DILATED = [(16, 64, 64, 1, 2), (8, 128, 128, 1, 2), (16, 32, 64, 2, 3), (32, 16, 16, 1, 4)]


def dilated_rows(cpu, batch, runs, timer):
    from dsptrain.backends.base import Backend

    rng = np.random.default_rng(3)
    rows = []
    for h, c, o, stride, d in DILATED:
        x = rng.integers(-127, 128, (batch, h, h, c), dtype=np.int8)
        w = rng.integers(-127, 128, (o, 3, 3, c), dtype=np.int8)
        oh = (h + 2 * d - 2 * d - 1) // stride + 1
        err = rng.integers(-127, 128, (batch, oh, oh, o), dtype=np.int8)
        a = (stride, d, d)

        def passes(owner):
            return (
                lambda: owner.conv2d_dilated_requant_s8(cpu, x, w, *a, "round", None),
                lambda: owner.conv2d_dilated_bwd_data_requant_s8(cpu, err, w, *a, (h, h), "round", None),
                lambda: owner.conv2d_dilated_bwd_weight_s8(cpu, err, x, *a, (3, 3)),
            )

        numpy_passes, native_passes = passes(Backend), passes(type(cpu))
        for mine, theirs in zip(native_passes, numpy_passes):
            got, want = mine(), theirs()
            same = all(np.array_equal(g, t) for g, t in zip(got, want)) if isinstance(got, tuple) else None
            assert same if same is not None else np.array_equal(got, want)
        ms = lambda fn: 1e3 * timer(fn, runs)  # noqa: E731
        row = {"H": h, "C": c, "O": o, "stride": stride, "dilation": d}
        row.update(zip(("numpy_fwd", "numpy_bwd_data", "numpy_wgrad"), map(ms, numpy_passes)))
        row.update(zip(("native_fwd", "native_bwd_data", "native_wgrad"), map(ms, native_passes)))
        row["native_speedup"] = sum(row[f"numpy_{p}"] for p in ("fwd", "bwd_data", "wgrad")) / sum(
            row[f"native_{p}"] for p in ("fwd", "bwd_data", "wgrad")
        )
        rows.append(row)
        print(f"  dilated {c}x{h}x{h} stride {stride} dilation {d} done", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="best of this many runs")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, help="threads for both (default: the native pool's)")
    parser.add_argument("--cpu-time", action="store_true", help="time by thread CPU time, one thread each")
    args = parser.parse_args()

    from dsptrain import _cpu_ops as native
    from dsptrain.backends import backend_class

    timer = best_time
    if args.cpu_time:
        timer, args.threads = cpu_best_time, 1
    if args.threads:
        native.set_threads(args.threads)
    torch = torch_peer(native.threads())
    cpu = backend_class("cpu")()
    meta = {
        "isa": native.isa(),
        "threads": native.threads(),
        "runs": args.runs,
        "batch": args.batch,
        "timing": "thread CPU time" if args.cpu_time else "wall clock",
        "torch": getattr(torch, "__version__", None),
        "load_at_start": list(os.getloadavg()),
    }
    rows = rows_for(cpu, torch, args.batch, args.runs, timer)
    dilated = dilated_rows(cpu, args.batch, args.runs, timer)
    meta["load_at_end"] = list(os.getloadavg())
    print(
        f"Grouped convolutions, batch {args.batch}, ms per call ({meta['timing']}, best of {args.runs}); "
        f"dsptrain {native.isa()}, {native.threads()} threads; load {meta['load_at_start'][0]:.2f} -> "
        f"{meta['load_at_end'][0]:.2f}"
    )
    print_table(rows)
    write_results("bench_grouped", rows, **meta)
    print(f"Dilated 3x3 convolutions, patches gathered by NumPy or natively, batch {args.batch}, ms per call")
    print_table(dilated)
    write_results("bench_dilated_gather", dilated, **meta)


if __name__ == "__main__":
    main()
