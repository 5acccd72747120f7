"""`dsptrain calibrate [DEVICE]`: measure each int8 product's MAC rate and write them into the device profile.

Placement, batch splitting and co-scheduling then model each product at its own kernel's
rate (a depthwise convolution at a fraction of a dense one's): the profile's `hook_speeds`
(runtime/calibrate.py says which shapes and how). The CPU's rates are timed on this
machine; the DSP's are packet counts on the critical path (QEMU's counters under the
emulator), turned into time by the profile's dsp.clock_hz. A part not measured keeps the
rates the profile had.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import UserError

PARTS = ("cpu", "dsp")


def add_parser(sub, common):
    parser = sub.add_parser(
        "calibrate",
        parents=[common],
        help="measure each int8 product's speed on the CPU and the DSP into a device profile",
        description=__doc__.split("\n\n", 1)[1].replace("\n", " "),
    )
    parser.add_argument(
        "device",
        nargs="?",
        default="v66",
        help="device profile: a name in configs/devices/ or a YAML path (default v66)",
    )
    parser.add_argument("--backends", default="cpu,dsp", help="the processors to measure, of cpu,dsp (default both)")
    parser.add_argument("--out", type=Path, help="write the profile here (default: the profile's own file)")
    parser.add_argument("--batch", type=int, default=64, help="rows of each CPU product (default 64)")
    parser.add_argument(
        "--dsp-batch",
        type=int,
        help="rows of each DSP product (default: --batch; under the emulator batch 64 takes about a "
        "minute, and a smaller batch measures the small layers' fixed costs larger than they are)",
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed calls per CPU product, the fastest kept (default 5)"
    )
    parser.add_argument("--only", help="comma-separated rate keys to measure (default all: cost.RATE_KEYS)")
    parser.add_argument("--dry-run", action="store_true", help="measure and print, write nothing")
    return parser


def _options(args) -> tuple[list[str], set[str] | None]:
    from ..cost import RATE_KEYS

    parts = [p for p in args.backends.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise UserError(f"--backends {args.backends!r}: give cpu, dsp or cpu,dsp")
    if args.dsp_batch is None:
        args.dsp_batch = args.batch
    for flag, value in (("--batch", args.batch), ("--dsp-batch", args.dsp_batch), ("--repeats", args.repeats)):
        if not 1 <= value <= 4096:
            raise UserError(f"{flag} {value}: give a number from 1 to 4096")
    only = None
    if args.only:
        only = {k for k in args.only.split(",") if k}
        unknown = sorted(only - set(RATE_KEYS))
        if unknown:
            raise UserError(f"--only: {', '.join(unknown)} not a rate key (known: {', '.join(RATE_KEYS)})")
    return parts, only


def _backend(part: str, profile):
    from ..backends import ACCELERATOR, HOST, backend_class

    name = {"cpu": HOST, "dsp": ACCELERATOR}[part]
    cls = backend_class(name)
    ok, why = cls.available()
    if not ok:
        raise UserError(f"--backends {part}: the {name} backend is not available: {why}")
    return cls(hvx_threads=profile.dsp.hvx_threads) if part == "dsp" else cls()


def run(args) -> int:
    from .. import calibrate
    from ..config import load_device

    parts, only = _options(args)
    profile = load_device(args.device)
    measured = dict(cpu=dict(profile.hook_speeds.cpu), dsp=dict(profile.hook_speeds.dsp))
    notes = dict(profile.hook_speeds.measured)
    batches = {"cpu": args.batch, "dsp": args.dsp_batch}
    unit = {"cpu": "MAC/s", "dsp": "MACs/cycle"}
    for part in parts:
        backend = _backend(part, profile)
        note = calibrate.provenance(part, batches[part], profile.dsp.hvx_threads)  # the CPU's load before it runs
        print(
            f"{part}: each product at batch {batches[part]}"
            + (f", fastest of {args.repeats} calls" if part == "cpu" else ", critical-path packets"),
            flush=True,
        )
        try:
            got, _ = calibrate.measure(
                part,
                backend,
                batches[part],
                args.repeats,
                only,
                progress=lambda r: print(
                    f"  {r['key']:<31} {r['shape']:<22} {r['rate']:10.4g} {unit[r['part']]}", flush=True
                ),
            )
            if part == "dsp":
                note += f", packets from the {backend.transport.name} transport"
        finally:
            backend.close()
        notes[part] = note
        measured[part].update(got)
        print(f"{part} rates ({unit[part]}):")
        for key in sorted(got):
            print(f"  {key:<31} {got[key]:10.4g}")
    speeds = dataclasses.replace(profile.hook_speeds, cpu=measured["cpu"], dsp=measured["dsp"], measured=notes)
    if args.dry_run:
        print("--dry-run: nothing written")
        return 0
    out = args.out or Path(profile.source)
    try:
        calibrate.write_profile(Path(profile.source), out, speeds)
    except OSError as exc:
        raise UserError(
            f"{out}: cannot write the profile ({exc.strerror or exc}); give another file with --out"
        ) from None
    print(f"wrote hook_speeds to {out}")
    return 0
