"""Each int8 product's measured rate on the CPU and the DSP (what `dsptrain calibrate` writes
into a device profile), beside the one rate per processor the cost model used before.

    python bench/bench_rates.py [--device v66] [--batch 64] [--repeats 5]

Per rate key (runtime/calibrate.py's shapes: MobileNetV2's depthwise and pointwise layers,
VGG-11's 3 x 3 convolutions, linear layers; each weighted by its count in the model): the
CPU backend's MAC/s on this machine (fastest of --repeats calls), the DSP's MACs per cycle on
the critical path (QEMU's packets at the profile's HVX threads) and that rate in MAC/s at the
profile's clock and at 500 MHz (the Snapdragon 865's cDSP clock in Mandheling's device
table), the profile's generic `macs_per_s` for each processor, and which processor the
placement would pick for the key's shapes at each clock (cost.py's roofline with the
profile's bandwidths and call costs: `cpu` only where the CPU's modeled time is shorter).
Written to bench/results/hook_rates.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsp_steps import SD865_CDSP_HZ  # noqa: E402
from report import print_table, write_results  # noqa: E402


def main() -> None:
    from dsptrain.backends import backend_class
    from dsptrain.calibrate import cases, measure
    from dsptrain.config import HookSpeeds, load_device
    from dsptrain.cost import speeds

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="v66")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    profile = load_device(args.device)
    load_start = os.getloadavg()[0]
    cpu_rates, cpu_rows = measure("cpu", backend_class("cpu")(), args.batch, args.repeats)  # rows: per shape
    dsp = backend_class("dsp")(hvx_threads=profile.dsp.hvx_threads)
    try:
        dsp_rates, _ = measure("dsp", dsp, args.batch, 1)
    finally:
        dsp.close()
    measured = dataclasses.replace(profile, hook_speeds=HookSpeeds({}, cpu_rates, dsp_rates))
    at_500 = dataclasses.replace(measured, dsp=dataclasses.replace(measured.dsp, clock_hz=SD865_CDSP_HZ))
    nbytes = {(c.key, c.shape): c.nbytes for c in cases(args.batch)}
    rows = []
    for key in sorted(cpu_rates):
        shapes = [r for r in cpu_rows if r["key"] == key]
        picks = {}
        for label, prof in (("1ghz", measured), ("500mhz", at_500)):
            cpu, dsp_s = speeds(prof, "cpu"), speeds(prof, "dsp")
            won = [
                cpu.seconds(r["macs"], nbytes[key, r["shape"]], key)
                < dsp_s.seconds(r["macs"], nbytes[key, r["shape"]], key)
                for r in shapes
            ]
            picks[label] = f"cpu {sum(won)}/{len(won)}"
        rows.append(
            {
                "key": key,
                "shapes": len(shapes),
                "cpu_macs_per_s": cpu_rates[key],
                "cpu_generic": profile.cpu.macs_per_s,
                "dsp_macs_per_cycle": dsp_rates[key],
                "dsp_macs_per_s": dsp_rates[key] * profile.dsp.clock_hz,
                "dsp_macs_per_s_500mhz": dsp_rates[key] * SD865_CDSP_HZ,
                "dsp_generic": profile.dsp.macs_per_s,
                "dsp_over_cpu": dsp_rates[key] * profile.dsp.clock_hz / cpu_rates[key],
                "placed_on_cpu_1ghz": picks["1ghz"],
                "placed_on_cpu_500mhz": picks["500mhz"],
            }
        )
    print_table(
        rows,
        title=f"measured int8 product rates, batch {args.batch} ({profile.name}: "
        f"{profile.dsp.hvx_threads} HVX threads, {profile.dsp.clock_hz / 1e9:g} GHz)",
    )
    write_results(
        "hook_rates",
        rows,
        device=profile.name,
        batch=args.batch,
        repeats=args.repeats,
        hvx_threads=profile.dsp.hvx_threads,
        clock_hz=profile.dsp.clock_hz,
        load_average_at_start=load_start,
    )


if __name__ == "__main__":
    main()
