"""The worked example of bringing a model in and out: a LeNet-5 pretrained in PyTorch (FP32)
on Fashion-MNIST classes 0-4, exported to ONNX, imported into dsptrain, fine-tuned with NITI
on classes 5-9 (the "personal" data) with its features frozen and with every layer
training, beside NITI from scratch; each result exported to ONNX and run in ONNX Runtime.
The peer, measured in the same run: PyTorch FP32 fine-tuning the same pretrained model the
same ways.

    python bench/bench_finetune.py                         # pretrain 3 epochs, fine-tune 3
    python bench/bench_finetune.py --epochs 1 --train-limit 5000
    python bench/bench_finetune.py --pretrain-only         # only write the pretrained ONNX file

Per row: test accuracy on classes 5-9 (5,000 test images), training seconds per epoch,
energy per batch (dsptrain's meter: RAPL where the machine has it, else the labelled
estimate from counted work), the memory plan's peak for one training step at the batch
size (runtime/memory/: weights, activations, errors, gradients, scratch; frozen layers
keep no gradient or weight-gradient activations); for the
dsptrain rows also ONNX Runtime's accuracy on the exported float file and the top-1
agreement of each export (float and QDQ, which for NITI carry its activation rounding)
with dsptrain's own evaluation, with the largest logit difference relative to the largest
logit, and the same for a plain float graph without the rounding (`plain`: what the
rounding fixes). Writes
bench/results/finetune.csv/.json. Times are wall clock on a shared machine: the load
(`uptime`) is printed before and after, read the seconds as indicative only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsptrain  # noqa: E402
import report  # noqa: E402
from dsptrain.config import CONFIG_ROOT  # noqa: E402
from dsptrain.data import load_fashion_mnist, select_classes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PRETRAINED = Path("runs/finetune/lenet5-fmnist-0to4.onnx")  # the run configs read it from here
# One thread: on a loaded 2-core machine PyTorch's second OpenMP thread spins and a LeNet
# step took ~30x longer (1.17 s vs 0.04 s, measured while writing this bench).
TORCH_THREADS = 1
EVAL_BATCH = 500  # dsptrain and ONNX Runtime see the same batches (NITI's ranges are per batch)
PRETRAIN_CLASSES, PERSONAL_CLASSES = [0, 1, 2, 3, 4], [5, 6, 7, 8, 9]
RUNS = {  # row label -> run config in configs/runs/
    "NITI, pretrained, features frozen": "finetune-lenet-niti-frozen",
    "NITI, pretrained, all layers": "finetune-lenet-niti-all",
    "NITI, from scratch": "finetune-lenet-niti-scratch",
}


def torch_lenet5(num_classes=5):
    """LeNet-5 as the zoo's (runtime/models.py), no biases, named as the zoo names its layers,
    so the imported layers are conv1 .. fc3 and `train.freeze` can name them."""
    import torch.nn as nn

    class LeNet5(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.relu1, self.pool1 = nn.Conv2d(1, 6, 5, padding=2, bias=False), nn.ReLU(), nn.MaxPool2d(2)
            self.conv2, self.relu2, self.pool2 = nn.Conv2d(6, 16, 5, bias=False), nn.ReLU(), nn.MaxPool2d(2)
            self.flatten = nn.Flatten()
            self.fc1, self.relu3 = nn.Linear(400, 120, bias=False), nn.ReLU()
            self.fc2, self.relu4 = nn.Linear(120, 84, bias=False), nn.ReLU()
            self.fc3 = nn.Linear(84, num_classes, bias=False)

        def forward(self, x):
            x = self.pool1(self.relu1(self.conv1(x)))
            x = self.flatten(self.pool2(self.relu2(self.conv2(x))))
            return self.fc3(self.relu4(self.fc2(self.relu3(self.fc1(x)))))

    return LeNet5()


def as_torch_input(images):
    import torch

    return torch.from_numpy(((images.astype(np.float32) - 128) / 128).transpose(0, 3, 1, 2).copy())


def torch_train(net, data, epochs, batch=64, lr=0.05, seed=0, trainable=None) -> float:
    """SGD with momentum 0.9 (FP32, PyTorch); returns seconds per epoch."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(TORCH_THREADS)
    params = [p for name, p in net.named_parameters() if trainable is None or name.split(".")[0] in trainable]
    for name, p in net.named_parameters():
        p.requires_grad_(trainable is None or name.split(".")[0] in trainable)
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    x_all, y_all = as_torch_input(data.images), torch.from_numpy(data.labels)
    rng = np.random.default_rng(seed)
    seconds = []
    net.train()
    for _ in range(epochs):
        started = time.perf_counter()
        order = torch.from_numpy(rng.permutation(len(y_all)))
        for first in range(0, len(order), batch):
            index = order[first : first + batch]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(x_all[index]), y_all[index]).backward()
            optimizer.step()
        seconds.append(time.perf_counter() - started)
    net.eval()
    return float(np.median(seconds))


def torch_accuracy(net, data) -> float:
    import torch

    with torch.no_grad():
        return float((net(as_torch_input(data.images)).argmax(1).numpy() == data.labels).mean())


def pretrain(epochs, train_limit) -> Path:
    import torch
    from dsptrain.interchange.torch_bridge import to_onnx_bytes

    torch.manual_seed(0)
    train = select_classes(load_fashion_mnist("train"), PRETRAIN_CLASSES).limit(train_limit)
    test = select_classes(load_fashion_mnist("test"), PRETRAIN_CLASSES)
    net = torch_lenet5(len(PRETRAIN_CLASSES))
    seconds = torch_train(net, train, epochs)
    PRETRAINED.parent.mkdir(parents=True, exist_ok=True)
    PRETRAINED.write_bytes(to_onnx_bytes(net, torch.zeros(1, 1, 28, 28)))
    print(
        f"pretrained LeNet-5 (PyTorch FP32) on classes 0-4: {epochs} epochs of {len(train)} images, "
        f"{seconds:.1f} s/epoch, test accuracy {torch_accuracy(net, test):.4f} -> {PRETRAINED}",
        flush=True,
    )
    return PRETRAINED


def dsptrain_row(label, config, epochs, train_limit, backend, out) -> dict:
    from dsptrain.agreement import agreement, dsptrain_logits, onnxruntime_logits
    from dsptrain.interchange import read_checkpoint
    from dsptrain.interchange.onnx_export import build_onnx

    run = dsptrain.load_run(CONFIG_ROOT / "runs" / f"{config}.yaml")
    run = dataclasses.replace(
        run,
        train=dataclasses.replace(run.train, epochs=epochs),
        data=dataclasses.replace(run.data, train_limit=train_limit),
    )
    out_dir = out / config
    trainer = dsptrain.Trainer(run, backend=backend, out_dir=out_dir, progress=False)
    trainer.checkpoint_path.unlink(missing_ok=True)
    (out_dir / "metrics.jsonl").unlink(missing_ok=True)
    planned = trainer.plans.get(run.train.batch_size, True).fitter(None, "none").choose(None).peak
    history = trainer.fit()
    backends = "+".join(trainer.backend_names)
    trainer.close()
    steps = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if s["kind"] == "step"]
    energy = [s["energy_j"] for s in steps if s.get("energy_j") is not None]
    test = trainer.test_data
    row = {
        "run": label,
        "trainer": f"dsptrain {run.recipe.name} ({backends})",
        "frozen": ",".join(run.train.freeze) or "-",
        "test_acc": round(100 * history[-1]["test_accuracy"], 2),
        "s/epoch": round(float(np.median([r["seconds"] for r in history])), 1),
        "J/batch": float(f"{np.median(energy):.3g}") if energy else None,
        "energy_meter": steps[-1].get("energy_meter") if steps else None,
        "plan_peak_MB": round(planned / 2**20, 2),
    }
    mine = dsptrain_logits(trainer.checkpoint_path, test.images, backend=backend, batch=EVAL_BATCH)
    plain = out_dir / "model-plain-float.onnx"  # the float graph without NITI's rounding: why it is there
    plain.write_bytes(build_onnx(read_checkpoint(trainer.checkpoint_path), niti=False).SerializeToString())
    for fmt, key in (("onnx", "ort"), ("onnx-qdq", "ort_qdq"), (None, "plain")):
        path = out_dir / f"model.{fmt}" if fmt else plain
        if fmt:
            dsptrain.export(trainer.checkpoint_path, path, fmt)
        theirs = onnxruntime_logits(path, test.images, batch=EVAL_BATCH)  # dsptrain's batches
        found = agreement(mine, theirs)
        row[f"{key}_acc"] = round(100 * float((theirs.argmax(1) == test.labels).mean()), 2)
        row[f"{key}_agree"] = round(100 * found["top1_agreement"], 2)
        row[f"{key}_max_dlogit"] = round(found["max_logit_diff"] / found["logit_scale"], 4)
    print(f"  {label}: {row}", flush=True)
    return row


def torch_rows(epochs, train_limit) -> list[dict]:
    """The peer: PyTorch FP32 fine-tuning the same pretrained file, features frozen and all layers."""
    import onnx
    import torch

    train = select_classes(load_fashion_mnist("train"), PERSONAL_CLASSES).limit(train_limit)
    test = select_classes(load_fashion_mnist("test"), PERSONAL_CLASSES)
    rows = []
    for label, trainable in (
        ("PyTorch FP32, pretrained, features frozen", {"fc1", "fc2", "fc3"}),
        ("PyTorch FP32, pretrained, all layers", None),
    ):
        net = torch_lenet5(len(PRETRAIN_CLASSES))
        weights = {
            i.name: torch.from_numpy(onnx.numpy_helper.to_array(i).copy())
            for i in onnx.load(PRETRAINED).graph.initializer
        }
        state = {k: weights[k] for k in net.state_dict() if k in weights and not k.startswith("fc3")}
        net.load_state_dict(state, strict=False)  # a new 5-class head, like dsptrain's
        seconds = torch_train(net, train, epochs, trainable=trainable)
        rows.append(
            {
                "run": label,
                "trainer": "PyTorch FP32 (CPU)",
                "frozen": "conv1,conv2" if trainable else "-",
                "test_acc": round(100 * torch_accuracy(net, test), 2),
                "s/epoch": round(seconds, 1),
            }
        )
        print(f"  {label}: {rows[-1]}", flush=True)
    return rows


def uptime() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-epochs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs")
    parser.add_argument("--train-limit", type=int, default=None, help="use only the first N training images")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--pretrain-only", action="store_true", help="write the pretrained ONNX file and stop")
    parser.add_argument("--out", type=Path, default=Path("runs/finetune"))
    args = parser.parse_args(argv)
    load_before = uptime()
    print(f"machine load before: {load_before}", flush=True)
    pretrain(args.pretrain_epochs, args.train_limit)
    if args.pretrain_only:
        return 0
    rows = [
        dsptrain_row(label, config, args.epochs, args.train_limit, args.backend, args.out)
        for label, config in RUNS.items()
    ]
    rows += torch_rows(args.epochs, args.train_limit)
    load_after = uptime()
    columns = [
        "run",
        "trainer",
        "test_acc",
        "s/epoch",
        "J/batch",
        "plan_peak_MB",
        "ort_acc",
        "ort_agree",
        "ort_max_dlogit",
        "ort_qdq_agree",
        "ort_qdq_max_dlogit",
        "plain_agree",
        "plain_max_dlogit",
    ]
    report.print_table(
        rows,
        columns,
        title=f"LeNet-5, Fashion-MNIST: pretrained on classes 0-4 (PyTorch FP32), "
        f"fine-tuned on 5-9, {args.epochs} epochs",
    )
    print(f"machine load before: {load_before}; after: {load_after}")
    report.write_results(
        "finetune",
        rows,
        pretrain_epochs=args.pretrain_epochs,
        epochs=args.epochs,
        train_limit=args.train_limit,
        load_before=load_before,
        load_after=load_after,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
