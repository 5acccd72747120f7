"""Federated NITI against FP32 FedAvg: accuracy per round, rounds to a target, bytes,
time and energy per client per round.

    OPENBLAS_NUM_THREADS=1 nice -n 5 python bench/bench_fl.py   # 10 clients, Dirichlet 0.5, 50 rounds
    python bench/bench_fl.py --rounds 5 --local-steps 10        # a quick look

Both runs are the same federation (LeNet-5, Fashion-MNIST split among --clients by
Dirichlet(--alpha), the same partitions, local steps, batch and rounds) through the same
ClientApp and ServerApp code, in one process (dsptrain.fl.simulate: Flower's FedAvg
loop and Messages, no SuperLink, clients one after another):

- NITI: int8 weights with power-of-two exponents on the wire, averaged exactly in
  integers (dsptrain.fl.aggregate);
- the peer, FP32 FedAvg: dsptrain's fp32 recipe on every client, float32 weights on
  the wire, averaged by Flower's own FedAvg (flwr.serverapp.strategy.FedAvg).

Bytes are the protobuf encoding of each client's reply record as Flower sends it; time
is the client's training steps (StepStats.time_s summed); energy is the run's meter per
step (the meter is named in the table; `estimate` is a model, not a measurement).
Writes fl.csv, fl.json (every round of both runs) and fl.png (accuracy per round).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dsptrain.config import CONFIG_ROOT  # noqa: E402
from dsptrain.fl.settings import load_fl_run  # noqa: E402
from dsptrain.fl.simulate import simulate  # noqa: E402
from report import RESULTS, print_table, write_results  # noqa: E402

RUNS = {
    "niti": CONFIG_ROOT / "runs" / "fl-lenet-fmnist-niti.yaml",
    "fp32": CONFIG_ROOT / "runs" / "fl-lenet-fmnist-fp32.yaml",
}


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def bench_config(name: str, args, out: Path) -> Path:
    """The shipped config with the bench's settings, written beside the results (the
    in-process clients read their config from a file, as SuperNodes do)."""
    data = yaml.safe_load(RUNS[name].read_text())
    data["name"] = f"bench-fl-{name}"
    data["data"] = {**data.get("data", {}), "test_limit": args.test_limit}
    data["train"] = {**data.get("train", {}), "batch_size": args.batch_size}
    data["energy"] = args.energy
    data["fl"].update(
        clients=args.clients,
        rounds=args.rounds,
        local_steps=args.local_steps,
        resume=False,
        min_train_clients=args.clients,
        min_available_clients=args.clients,
        partition={"kind": "dirichlet", "alpha": args.alpha, "seed": args.seed},
    )
    path = out / f"bench-fl-{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def rounds_to(history: list[dict], target: float) -> int | None:
    return next((h["round"] for h in history if h["test_accuracy"] >= target), None)


def plot(histories: dict, target: float, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, history in histories.items():
        ax.plot([h["round"] for h in history], [100 * h["test_accuracy"] for h in history], marker=".", label=name)
    ax.axhline(100 * target, color="gray", linestyle="--", linewidth=0.8, label=f"{100 * target:.0f} %")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration of the label split")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--local-steps", type=int, default=25, help="batches each client trains per round")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--test-limit", type=int, default=10000, help="test images the server evaluates on")
    parser.add_argument("--target", type=float, default=0.85, help="accuracy for 'rounds to target'")
    parser.add_argument("--energy", default="auto", help="meter: auto | rapl | estimate[:device] ...")
    parser.add_argument("--seed", type=int, default=0, help="partition seed")
    parser.add_argument("--recipes", default="niti,fp32")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    out = Path(args.out)
    work = out / "fl"
    work.mkdir(parents=True, exist_ok=True)
    print(f"load before: {load()}")
    from dsptrain.energy import make_meter

    meter, why = make_meter(args.energy)
    meter.close()
    print(f"energy meter: {why}")

    histories, summary, rows = {}, [], []
    for name in args.recipes.split(","):
        path = bench_config(name, args, work)
        flrun = load_fl_run(path)
        run_dir = work / flrun.run.name
        for stale in ("server.npz", "rounds.json"):
            (run_dir / stale).unlink(missing_ok=True)
        started = time.perf_counter()
        history = simulate(flrun, path, run_dir)
        wall = time.perf_counter() - started
        label = "NITI (int8, exact integer FedAvg)" if flrun.integer else "FP32 (Flower FedAvg)"
        histories[label] = history
        trained = history[1:]
        for h in history:
            rows.append(
                {
                    "recipe": name,
                    "round": h["round"],
                    "test_accuracy": h["test_accuracy"],
                    "accepted": h["accepted"],
                    "upload_bytes_per_client": h["upload_bytes_per_client"],
                    "time_s_per_client": h["time_s_per_client"],
                    "time_s_per_batch": h["time_s_per_batch"],
                    "energy_j_per_client": h["energy_j_per_client"],
                    "train_loss": h["train_loss"],
                }
            )
        summary.append(
            {
                "run": label,
                "final acc %": 100 * history[-1]["test_accuracy"],
                "best acc %": 100 * max(h["test_accuracy"] for h in trained),
                f"rounds to {100 * args.target:.0f} %": rounds_to(history, args.target) or f"> {args.rounds}",
                "upload B/client/round": trained[-1]["upload_bytes_per_client"],
                "time s/client/round (median)": _median(h["time_s_per_client"] for h in trained),
                "energy J/client/round (median)": _median(h["energy_j_per_client"] for h in trained),
                "meter": meter.name,
                "wall s": wall,
            }
        )
        print(f"{label}: final {history[-1]['test_accuracy']:.4f} in {wall:.0f} s; load {load()}", flush=True)

    if len(summary) == 2:
        ratio = summary[1]["upload B/client/round"] / summary[0]["upload B/client/round"]
        print(f"upload ratio FP32 / NITI: {ratio:.3f}x (target >= 3.9x)")
    print_table(
        summary,
        title=f"federated LeNet-5, Fashion-MNIST: {args.clients} clients, Dirichlet alpha "
        f"{args.alpha}, {args.local_steps} local steps of {args.batch_size} per round, {args.rounds} rounds",
    )
    print(f"load after: {load()}")
    write_results("fl", rows, out, summary=summary, load=load(), settings=vars(args), energy_meter=why)
    plot(
        histories,
        args.target,
        out / "fl.png",
        f"{args.clients} clients, Dirichlet {args.alpha}, {args.local_steps} steps x {args.batch_size} per round",
    )
    return 0


def _median(values):
    import statistics

    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


if __name__ == "__main__":
    sys.exit(main())
