"""Training on one's own data end to end: a folder, an npz and Python arrays of the same
images give the same weights; bad files stop the run with one line naming them; a
1-image class and a gray photo in an RGB set train."""

import json

import dsptrain
import numpy as np
import pytest
import yaml
from dsptrain.cli import main

from .helpers import class_images, write_folder


def write_run(path, data, recipe="niti", model=None, **train):
    path.write_text(
        yaml.safe_dump(
            {
                "name": "own",
                "recipe": recipe,
                "backend": "cpu",
                "model": model or {"name": "lenet5", "num_classes": 3},
                "data": data,
                "train": {"epochs": 1, "batch_size": 8, "seed": 3, **train},
            }
        )
    )
    return path


@pytest.fixture
def same_images(tmp_path):
    """18 gray 28x28 images, class by class: the order an image folder lists them in."""
    rng = np.random.default_rng(4)
    images, labels = class_images(rng, 18, shape=(28, 28, 1))
    order = np.argsort(labels, kind="stable")
    images, labels = images[order], labels[order]
    write_folder(tmp_path / "photos", images, labels)
    np.savez(tmp_path / "photos.npz", images=images, labels=labels)
    np.save(tmp_path / "x.npy", images[..., 0])  # (N, H, W): one channel
    np.save(tmp_path / "y.npy", labels.astype(np.int32))
    return images, labels


def weights(out):
    state, _ = dsptrain.checkpoint.load(out / "checkpoint.npz")
    return state


def test_folder_npz_npy_and_arrays_give_the_same_weights(tmp_path, same_images, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = write_run(tmp_path / "folder.yaml", {"folder": "photos", "cache_dir": "cache"})
    npz = write_run(tmp_path / "npz.yaml", {"npz": "photos.npz", "x": "images", "y": "labels"})
    assert main(["train", str(folder), "--quiet", "--out", "a"]) == 0
    assert main(["train", str(npz), "--quiet", "--out", "b"]) == 0
    npy = write_run(tmp_path / "npy.yaml", {"npy": ["x.npy", "y.npy"]})
    assert main(["train", str(npy), "--quiet", "--out", "d"]) == 0
    trainer = dsptrain.Trainer(dsptrain.load_run(npz), out_dir="c", progress=False, train_data=same_images)
    trainer.fit()
    trainer.close()
    a, b, c, d = (weights(tmp_path / out) for out in "abcd")
    assert a.keys() == b.keys() == c.keys() == d.keys()
    for name in a:
        for other in (b, c, d):
            np.testing.assert_array_equal(a[name].q, other[name].q)
    _, meta = dsptrain.checkpoint.load(tmp_path / "a" / "checkpoint.npz")
    assert meta["classes"] == ["bag", "trouser", "tshirt"]
    assert main(["export", "a", "--format", "npz", "--out", "m.npz"]) == 0  # the class names go into the export
    assert json.loads(str(np.load(tmp_path / "m.npz")["__model__"]))["classes"] == ["bag", "trouser", "tshirt"]
    assert main(["export", "a", "--format", "onnx", "--out", "m.onnx"]) == 0
    import onnx

    props = {p.key: p.value for p in onnx.load(tmp_path / "m.onnx").metadata_props}
    assert json.loads(props["dsptrain.classes"]) == ["bag", "trouser", "tshirt"]


@pytest.mark.parametrize(
    "spoil, message",
    [
        (
            lambda root: (root / "bag" / "0003.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40),
            "run.yaml: data.folder: photos/bag/0003.png: cannot decode the image",
        ),
        (
            lambda root: (root / "bag" / "zz.jpg").write_bytes(b"\xff\xd8\xff" + b"\0" * 40),
            "run.yaml: data.folder: photos/bag/zz.jpg: cannot decode the image",
        ),
        (lambda root: (root / "coat").mkdir(), "run.yaml: data.folder: photos/coat: empty class folder"),
    ],
)
def test_bad_folders_are_refused_with_one_line(tmp_path, same_images, monkeypatch, capsys, spoil, message):
    monkeypatch.chdir(tmp_path)
    spoil(tmp_path / "photos")
    run = write_run(tmp_path / "run.yaml", {"folder": "photos", "cache_dir": "cache"})
    assert main(["train", str(run), "--quiet", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dsptrain: error: ") and message in err[0], err
    assert not (tmp_path / "out" / "checkpoint.npz").exists()


def test_one_image_class_and_gray_photo_in_rgb_set_train(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(5)
    images, labels = class_images(rng, 16, shape=(32, 32, 3), classes=2)
    write_folder(tmp_path / "photos", images, labels, names=("bag", "tshirt"))
    (tmp_path / "photos" / "coat").mkdir()
    Image.fromarray(images[0]).save(tmp_path / "photos" / "coat" / "only.jpg")  # a 1-image class
    Image.fromarray(images[1].mean(axis=2).astype(np.uint8)).save(tmp_path / "photos" / "bag" / "gray.png")
    run = write_run(
        tmp_path / "run.yaml",
        {"folder": "photos", "cache_dir": "cache", "val_fraction": 0.25},
        recipe={"name": "fp32", "optimizer": {"lr": 0.005}},
        model={"name": "resnet18_nobn", "num_classes": 3},
        checkpoint_best="val_loss",
        batch_size=6,
    )
    assert main(["train", str(run), "--quiet", "--out", "out"]) == 0
    history = [
        line
        for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
        if '"epoch"' in line and '"kind": "epoch"' in line
    ]
    assert len(history) == 1 and "val_loss" in history[0] and "test_accuracy" not in history[0]
    assert (tmp_path / "out" / "checkpoint_best.npz").exists()


def test_normalize_reaches_the_recipe_and_is_checked_against_the_model(tmp_path, same_images, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    data = {"npz": "photos.npz", "x": "images", "y": "labels"}
    plain = write_run(tmp_path / "plain.yaml", data)
    normal = write_run(tmp_path / "normal.yaml", {**data, "normalize": {"mean": [0.3], "std": [0.2]}})
    assert main(["train", str(plain), "--quiet", "--out", "p"]) == 0
    assert main(["train", str(normal), "--quiet", "--out", "n"]) == 0
    p, n = weights(tmp_path / "p"), weights(tmp_path / "n")
    assert any(not np.array_equal(p[k].q, n[k].q) for k in p)  # another input mapping, other weights
    rgb = write_run(tmp_path / "rgb.yaml", {**data, "normalize": {"mean": [0.4, 0.4, 0.4], "std": [0.2]}})
    assert main(["train", str(rgb), "--quiet", "--out", "r"]) == 2
    assert (
        "rgb.yaml: data.normalize.mean: [0.4, 0.4, 0.4]: give one value or one per channel (1)"
        in capsys.readouterr().err
    )


def test_early_stopping_ends_the_run_and_a_resume_stays_stopped(tmp_path, same_images, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = write_run(
        tmp_path / "run.yaml",
        {"npz": "photos.npz", "x": "images", "y": "labels"},
        epochs=5,
        early_stopping={"metric": "train_loss", "patience": 1, "min_delta": 1e6},
    )
    trainer = dsptrain.Trainer(dsptrain.load_run(run), out_dir="out", progress=False)
    history = trainer.fit()
    trainer.close()
    assert [r["epoch"] for r in history] == [1, 2]  # epoch 2 did not beat epoch 1 by min_delta
    again = dsptrain.Trainer(dsptrain.load_run(run), out_dir="out", progress=False)
    again.load()
    assert again.fit() == [] and again.epoch == 2
    again.close()
