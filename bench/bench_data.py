"""Training from an image folder: what decoding costs once, and what the data costs per epoch after.

    python bench/bench_data.py [--photos 6000] [--size 64] [--recipe niti] [--batch-size 64]
                               [--epochs 2] [--augment]

A folder of --photos JPEG photos at --size x --size (Fashion-MNIST's training images,
scaled up with Pillow and saved as quality-90 JPEGs in ten class folders) is made in a
temp directory, then trained on with --model (LeNet-5 by default, 28x28x1: every photo is
decoded, turned gray and scaled down) through the Trainer:

  decode       the first load: hash every file, decode them all (Pillow, threads), write
               the memory-mapped cache
  cached load  the next run's load: hash every file, map the cache (nothing decoded)
  epoch N      one pass of Trainer.step over the loader's batches, plain (gathered on
               the main thread) and with flips and 2-pixel crops (gathered and augmented
               on the loader's thread while the step runs, or on the main thread); `steps` is the sum of the steps' own time
               (StepStats.time_s), `waiting` the time the loop waited for a batch,
               `data share` waiting / epoch; `data alone` the seconds the same loader
               takes on the main thread with no step (median of 3): the data's own cost
  peer         PIL + a torch DataLoader (num_workers 0, as many threads as the Trainer
               gets) decoding every photo each epoch, as a loader without a cache does:
               seconds per epoch of data alone

Results go to bench/results/bench_data.{csv,json}; the temp folder and cache are removed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import print_table, write_results  # noqa: E402


def make_photos(root: Path, count: int, size: int) -> None:
    from dsptrain.data import FASHION_MNIST_CLASSES, load_fashion_mnist
    from PIL import Image

    data = load_fashion_mnist("train")
    for name in FASHION_MNIST_CLASSES:
        (root / name).mkdir(parents=True)
    for i in range(count):
        image = Image.fromarray(data.images[i, :, :, 0]).convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
        image.save(root / FASHION_MNIST_CLASSES[data.labels[i]] / f"{i:05d}.jpg", quality=90)


def timed_epoch(trainer, loader, epoch: int) -> dict:
    """One epoch of Trainer.step over `loader`'s batches: wall, steps' own time, time waiting for data."""
    waiting = steps = 0.0
    started = time.perf_counter()
    batches = iter(loader.epoch(epoch))
    while True:
        t0 = time.perf_counter()
        try:
            images, labels = next(batches)
        except StopIteration:
            break
        waiting += time.perf_counter() - t0
        stats = trainer.step(images, labels)
        steps += stats.time_s
    wall = time.perf_counter() - started
    return {"epoch_s": wall, "steps_s": steps, "waiting_s": waiting, "data_share": waiting / wall}


def _data_alone(loader, epoch: int) -> float:
    """Seconds to produce an epoch's batches on this thread with no step: the data's own cost."""
    started = time.perf_counter()
    for _ in loader.epoch(epoch):
        pass
    return time.perf_counter() - started


def peer_epoch(root: Path, shape, batch_size: int) -> float | None:
    """Seconds for one epoch of a PIL + torch DataLoader that decodes every file (no cache)."""
    try:
        import torch
        from PIL import Image, ImageOps
    except ImportError:
        return None
    files = sorted(root.rglob("*.jpg"))

    class Photos(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            with Image.open(files[i]) as image:
                image = ImageOps.fit(
                    image.convert("L" if shape[2] == 1 else "RGB"), (shape[1], shape[0]), Image.Resampling.BILINEAR
                )
                return torch.from_numpy(np.asarray(image, np.uint8).copy()), 0

    loader = torch.utils.data.DataLoader(Photos(), batch_size=batch_size, shuffle=True, num_workers=0)
    started = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photos", type=int, default=6000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--recipe", default="niti")
    parser.add_argument("--model", default="lenet5", help="a zoo model; the photos decode to its input shape")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4, help="epochs per loader setting (the first after decoding)")
    args = parser.parse_args()

    import dsptrain
    from dsptrain.data import Augment, Dataset, Loader

    work = Path(tempfile.mkdtemp(prefix="bench_data."))
    try:
        root, cache = work / "photos", work / "cache"
        started = time.perf_counter()
        make_photos(root, args.photos, args.size)
        print(
            f"made {args.photos} photos of {args.size}x{args.size} in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
        from dsptrain.models import build_model

        shape = build_model(args.model).input_shape
        started = time.perf_counter()
        data = Dataset.from_folder(root, shape, cache_dir=cache)
        decode_s = time.perf_counter() - started
        started = time.perf_counter()
        data = Dataset.from_folder(root, shape, cache_dir=cache)
        cached_s = time.perf_counter() - started

        (work / "run.yaml").write_text(
            f"recipe: {args.recipe}\nmodel: {args.model}\ntrain: {{batch_size: {args.batch_size}, seed: 0}}\n"
        )
        run = dsptrain.load_run(work / "run.yaml")
        trainer = dsptrain.Trainer(run, progress=False, out_dir=work / "run", train_data=data)
        rows = [
            {"part": "decode (first load)", "seconds": decode_s, "photos": args.photos},
            {"part": "cached load (next run)", "seconds": cached_s, "photos": args.photos},
        ]
        flips = Augment(flip=True, crop_padding=2)
        for label, augment, background in (
            ("plain", None, False),
            ("flip + crop 2, thread", flips, True),
            ("flip + crop 2, main thread", flips, False),
        ):
            loader = Loader(trainer.train_data, args.batch_size, seed=0, augment=augment, background=background)
            inline = Loader(trainer.train_data, args.batch_size, seed=0, augment=augment, background=False)
            epochs = [timed_epoch(trainer, loader, epoch) for epoch in range(args.epochs)]
            alone = statistics.median(_data_alone(inline, epoch) for epoch in range(3))
            for epoch, row in enumerate(epochs, 1):
                rows.append(
                    {
                        "part": f"{label}: epoch {epoch}",
                        "photos": len(trainer.train_data),
                        "seconds": row["epoch_s"],
                        "steps_s": row["steps_s"],
                        "waiting_s": row["waiting_s"],
                        "data_share": row["data_share"],
                    }
                )
            later = [row["epoch_s"] for row in epochs[1:]] or [epochs[0]["epoch_s"]]
            rows.append(
                {
                    "part": f"{label}: median epoch 2..{args.epochs}",
                    "photos": len(trainer.train_data),
                    "seconds": statistics.median(later),
                    "data_share": statistics.median(r["data_share"] for r in epochs[1:] or epochs),
                    "data_alone_s": alone,
                    "data_alone_share": alone / statistics.median(later),
                }
            )
        trainer.close()
        peers = [peer_epoch(root, shape, args.batch_size) for _ in range(2)]
        if peers[0] is not None:
            rows.append(
                {
                    "part": "peer: PIL + torch DataLoader decoding each epoch (data alone)",
                    "photos": args.photos,
                    "seconds": statistics.median(peers),
                }
            )
        load = os.getloadavg()
        print_table(
            rows,
            ["part", "photos", "seconds", "steps_s", "waiting_s", "data_share", "data_alone_s", "data_alone_share"],
            title=f"bench_data: {args.photos} JPEGs {args.size}x{args.size} -> {args.model} "
            f"{'x'.join(map(str, shape))}, "
            f"{run.recipe.name}, batch {args.batch_size}, load {load[0]:.2f}",
        )
        write_results(
            "bench_data",
            rows,
            recipe=run.recipe.name,
            model=args.model,
            batch_size=args.batch_size,
            size=args.size,
            load=list(load),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
