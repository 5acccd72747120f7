"""What profiling costs: a training step with profiling off (this tree) against the same
step on a baseline tree without the profiler (a checkout of main), and with profiling on,
in alternating rounds, each system in a fresh process per round.

    python bench/bench_profile.py --baseline DIR [--rounds 5] [--steps 30] [--model lenet5]

DIR holds the baseline's package as DIR/dsptrain (e.g. `git archive main runtime configs |
tar -x -C DIR; ln -s runtime DIR/dsptrain`, and the built runtime/_cpu_ops*.so copied in
when the C++ is the same). Each round runs every system once, in turn, in its own process:
--warmup steps, then --steps timed steps (StepStats.time_s, the executor's run); a round's
figure is the median step, in wall time (StepStats.time_s) and in the process's CPU time
around the Trainer's step (steadier on a busy machine). The table has each system's median
over rounds and its ratio to the baseline's per round (median and range): profiling off
should be 1.00 within noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import print_table, write_results  # noqa: E402

HERE = Path(__file__).resolve().parents[1]


def child(args) -> None:
    """One system's steps in this process: prints the step times as a JSON list."""
    import dataclasses

    import dsptrain
    from dsptrain import data as datasets
    from dsptrain.config import CONFIG_ROOT

    run = dsptrain.load_run(CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
    run = dataclasses.replace(
        run,
        model=dataclasses.replace(run.model, name=args.model),
        backend=args.backend,
        data=dataclasses.replace(run.data, dataset="synthetic"),
        train=dataclasses.replace(run.train, batch_size=args.batch),
    )
    trainer = dsptrain.Trainer(run, out_dir="/tmp/dsptrain-bench-profile", progress=False)
    try:
        count = args.warmup + args.steps
        batches = [b for _, b in zip(range(count), datasets.batches(trainer.train_data, args.batch, 0, 0))]
        step, cpu = trainer.step, []

        def timed_step(images, labels):  # the process's CPU seconds too: steadier than wall time on a busy machine
            started = time.process_time()
            stats = step(images, labels)
            cpu.append(time.process_time() - started)
            return stats

        if args.child == "on":
            from dsptrain.profile import record_steps

            recorder = record_steps(trainer.executor, timed_step, batches, args.warmup)
            times = [s.stats.time_s for s in recorder.steps]
        else:
            times = [timed_step(images, labels).time_s for images, labels in batches][args.warmup :]
    finally:
        trainer.close()
    print(json.dumps({"wall": times, "cpu": cpu[args.warmup :]}))


def run_child(system: str, args) -> dict:
    env = dict(os.environ)
    mode = "off"
    if system == "baseline":
        env["PYTHONPATH"] = str(Path(args.baseline).resolve())
    else:
        mode = "on" if system == "profiling on" else "off"
        env.pop("PYTHONPATH", None)
    cmd = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--model",
        args.model,
        "--batch",
        str(args.batch),
        "--backend",
        args.backend,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/tmp")
    if proc.returncode:
        raise SystemExit(f"{system}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="directory holding the baseline's dsptrain package")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--model", default="lenet5")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--out", help="results directory (default bench/results)")
    parser.add_argument("--child", choices=("off", "on"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not args.baseline or not (Path(args.baseline) / "dsptrain" / "__init__.py").exists():
        raise SystemExit("--baseline DIR: DIR/dsptrain/__init__.py must exist (see this file's docstring)")
    systems = ("baseline", "profiling off", "profiling on")
    medians = {s: {"wall": [], "cpu": []} for s in systems}
    for r in range(args.rounds):
        order = systems if r % 2 == 0 else tuple(reversed(systems))  # none goes first every round
        for system in order:
            for kind, values in run_child(system, args).items():
                medians[system][kind].append(statistics.median(values))
        print(
            f"round {r + 1}: "
            + ", ".join(
                f"{s} {medians[s]['wall'][-1] * 1e3:.3f} ms (cpu {medians[s]['cpu'][-1] * 1e3:.3f})" for s in systems
            ),
            flush=True,
        )
    rows = []
    for system in systems:
        row = {"system": system}
        for kind in ("wall", "cpu"):
            mine, base = medians[system][kind], medians["baseline"][kind]
            ratios = [a / b for a, b in zip(mine, base)]
            row.update(
                {
                    f"{kind}_ms": statistics.median(mine) * 1e3,
                    f"{kind}_vs_baseline": statistics.median(ratios),
                    f"{kind}_range": f"{min(ratios):.3f}-{max(ratios):.3f}",
                }
            )
        rows.append(row)
    print_table(
        rows,
        title=f"{args.model} NITI step, batch {args.batch}, {args.backend}: median of each round's "
        f"median over {args.steps} steps, {args.rounds} alternating rounds",
    )
    write_results(
        "profile_overhead",
        rows,
        Path(args.out) if args.out else None,
        model=args.model,
        batch=args.batch,
        backend=args.backend,
        steps=args.steps,
        rounds=args.rounds,
    )


if __name__ == "__main__":
    main()
