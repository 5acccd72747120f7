"""NITI training steps on the emulated DSP through the Trainer, modeled on a device profile
at its clock and at the Snapdragon 865's cDSP clock, beside the same step on this machine's
`cpu` backend (bench_dsp.py --only steps; bench/results/dsp_steps.json)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from pathlib import Path

from dsptrain.cost import dsp_model_time, modeled_step_seconds
from report import write_results
from zoo_models import zoo_model

MANDHELING_VGG11_S = 0.23  # s per batch: VGG-11, CIFAR-10, batch 64, 150 epochs in 7.5 h (Mandheling, MobiCom 2022)
SD865_CDSP_HZ = 5.0e8  # Mandheling's device table: the Snapdragon 865's cDSP clock


def at_clock(profile, clock_hz: float):
    """`profile` with its DSP at `clock_hz` (the modeled time at another cDSP clock)."""
    return dataclasses.replace(profile, dsp=dataclasses.replace(profile.dsp, clock_hz=clock_hz))


def cpu_step_seconds(run, steps: int) -> float:
    """The peer measured in the same run: the same step on this machine's `cpu` backend
    (median of `steps` after one warm-up; wall time, so it carries the machine's load)."""
    from dsptrain import data as datasets
    from dsptrain.train import Trainer

    trainer = Trainer(
        run,
        backend="cpu",
        out_dir=Path("/tmp") / f"bench-dsp-cpu-{os.getpid()}",
        progress=False,
        model=zoo_model(run.model.name),
    )
    times = []
    for i, (x, y) in enumerate(datasets.batches(trainer.train_data, 64, 0, 0)):
        if i > steps:
            break
        t0 = time.perf_counter()
        trainer.step(x, y)
        if i:
            times.append(time.perf_counter() - t0)
    trainer.close()
    return statistics.median(times)


def step_rows(models: list[str], profile, steps: int = 2) -> list[dict]:
    """NITI training steps (batch 64) on the emulated DSP through the Trainer; the last
    step's DSP cost, its modeled time (the trainer's dsp_model_s) and the CPU's share."""
    import dsptrain
    from dsptrain import data as datasets
    from dsptrain.config import CONFIG_ROOT
    from dsptrain.train import Trainer

    rows = []
    for model in models:
        run = dsptrain.load_run(CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
        data = run.data if model == "lenet5" else dataclasses.replace(run.data, dataset="synthetic")
        data = dataclasses.replace(data, train_limit=64 * max(steps, 4), test_limit=64)
        run = dataclasses.replace(
            run,
            name=f"bench-dsp-{model}",
            model=dataclasses.replace(run.model, name=model),
            data=data,
            train=dataclasses.replace(run.train, batch_size=64),
            scheduler=dataclasses.replace(run.scheduler, device=profile.name),
        )
        trainer = Trainer(
            run,
            backend="dsp",
            out_dir=Path("/tmp") / f"bench-dsp-{os.getpid()}",
            progress=False,
            model=zoo_model(model),
        )
        dsp, taken = trainer.backends["dsp"], []
        take = dsp.take_cost_log

        def spy(take=take, taken=taken):  # keep what the trainer takes after each step
            got = take()
            taken.append(got)
            return got

        dsp.take_cost_log = spy
        for i, (x, y) in enumerate(datasets.batches(trainer.train_data, 64, 0, 0)):
            if i >= steps:
                break
            before = list(dsp.total_thread_packets)
            stats = trainer.step(x, y)
        log, calls = taken[-1]
        shares = [after - b for after, b in zip(dsp.total_thread_packets[: profile.dsp.hvx_threads], before)]
        plan = trainer.plans.get(64, True)
        placed = [plan.backend_of(op) for op in plan.graph.ops if not op.is_alias()]
        depthwise = [plan.backend_of(op) for op in plan.graph.ops if any(h.startswith("dwconv2d") for h in op.hooks)]
        trainer.close()
        cpu_s = cpu_step_seconds(run, 3)
        packets, critical = sum(c[1] for c in log), sum(c[2] for c in log)
        model_t = dsp_model_time(profile, log, calls)
        at_500 = dsp_model_time(at_clock(profile, SD865_CDSP_HZ), log, calls)
        cpu_wall = stats.backend_time_s.get("cpu", 0.0)
        macs = stats.int8_macs.get("dsp", 0)
        rows.append(
            {
                "model": model,
                "batch": stats.batch,
                "dsp_ops": len(log),
                "calls": calls,
                "ops_on_dsp": f"{placed.count('dsp')}/{len(placed)}",
                "dsp_op_share": round(placed.count("dsp") / len(placed), 3),
                "dsp_mac_share": round(macs / max(sum(stats.int8_macs.values()), 1), 4),
                "depthwise_on_dsp": f"{depthwise.count('dsp')}/{len(depthwise)}" if depthwise else None,
                "dsp_macs": macs,
                "packets": packets,
                "critical": critical,
                "serial_packets": packets - sum(shares),
                "thread_packets": shares,
                "macs_per_packet": round(macs / max(packets, 1), 1),
                "compute_s": model_t.compute_s,
                "memory_s": model_t.memory_s,
                "call_s": model_t.call_s,
                "dsp_model_s": stats.dsp_model_s,
                "dsp_model_s_500mhz": at_500.seconds,
                "cpu_wall_s": cpu_wall,
                "step_model_s": modeled_step_seconds(model_t.seconds, cpu_wall, plan.micro_batches),
                "step_model_s_500mhz": modeled_step_seconds(at_500.seconds, cpu_wall, plan.micro_batches),
                "wall_s": stats.time_s,
                "cpu_backend_s": cpu_s,
                "mandheling_s": MANDHELING_VGG11_S if model == "vgg11" else None,
            }
        )
    return rows


def print_steps(steps: list[dict], profile, models: str) -> list[dict]:
    """Print the training steps' table and write it to bench/results/dsp_steps.json."""
    threads = profile.dsp.hvx_threads
    if steps:
        write_results(
            "dsp_steps",
            steps,
            device=profile.name,
            clock_hz=profile.dsp.clock_hz,
            hvx_threads=threads,
            batch=64,
            models=models,
        )
        print(f"\nNITI training step, batch 64, on the emulated DSP; modeled on {profile.name}:")
        print(
            f"{'model':8} {'DSP MACs':>12} {'packets':>12} {f'crit {threads}t':>12} {'MAC/pkt':>8} "
            f"{'model s':>8} {'cpu wall s':>10} {'cpu backend s':>13} {'Mandheling s':>12}"
        )
        for r in steps:
            mh = f"{r['mandheling_s']:.2f}" if r["mandheling_s"] else "n/a (VGG-11 only)"
            print(
                f"{r['model']:8} {r['dsp_macs']:>12} {r['packets']:>12} {r['critical']:>12} "
                f"{r['macs_per_packet']:>8} {r['dsp_model_s']:>8.4f} {r['cpu_wall_s']:>10.4f} "
                f"{r['cpu_backend_s']:>13.4f} {mh:>12}"
            )
        print(
            "model s: the DSP's modeled time (critical packets / clock, DDR term, calls); cpu wall s: the "
            "step's CPU ops here; cpu backend s: the whole step on this machine's cpu backend (peer)"
        )
        print("packets of the step per HVX thread (measured on each worker thread) and serial (calling thread):")
        for r in steps:
            print(
                f"{r['model']:8} serial {r['serial_packets']:>10}  "
                + "  ".join(f"t{t} {p:>10}" for t, p in enumerate(r["thread_packets"]))
            )
        print(
            f"{'model':8} {'ops on DSP':>10} {'DSP MAC share':>13} {'depthwise on DSP':>16} "
            f"{'step model s':>12} {'at 500 MHz':>10}"
        )
        for r in steps:
            print(
                f"{r['model']:8} {r['ops_on_dsp']:>10} {r['dsp_mac_share']:>13} {str(r['depthwise_on_dsp']):>16} "
                f"{r['step_model_s']:>12.4f} {r['step_model_s_500mhz']:>10.4f}"
            )
        print(
            "step model s: the DSP's modeled time with the CPU's measured ops, overlapped as the plan's "
            "micro-batches run them (cost.modeled_step_seconds); at 500 MHz: the same packets at the "
            "Snapdragon 865's cDSP clock"
        )
    return steps
