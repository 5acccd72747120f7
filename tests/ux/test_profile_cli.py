"""`dsptrain profile` and what it writes, `dsptrain plot --trace`, and the logs a run writes
for other viewers: CSV always, TensorBoard event files read back with TensorBoard's own reader."""

import csv
import json
import math

import pytest
from dsptrain.cli import main
from dsptrain.profile.logs import RunLog


def test_profile_command_writes_table_csv_json_and_trace(tmp_path, run_file, capsys):
    out, trace = tmp_path / "prof", tmp_path / "trace.json"
    code = main(
        [
            "profile",
            str(run_file()),
            "--steps",
            "2",
            "--warmup",
            "1",
            "--out",
            str(out),
            "--trace",
            str(trace),
            "--backend",
            "cpu",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "per layer" in printed and "total: step (measured)" in printed and "conv1.fwd" in printed
    data = json.loads((out / "profile.json").read_text())
    assert data["steps"] == 2 and data["batch"] == 64 and data["recipe"] == "niti"
    names = [r["name"] for r in data["ops"]]
    assert len(names) == len(set(names)) and all(r["calls"] == 2 for r in data["ops"])
    with open(out / "profile.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["name"] for r in rows if r["level"] == "op"] == names
    total = next(r for r in rows if r["level"] == "total")
    assert math.isclose(float(total["seconds"]), sum(data["step_seconds"]))
    assert (out / "profile.txt").read_text().splitlines()[0] == printed.splitlines()[0]
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" and e["cat"] != "step" for e in events) == sum(r["calls"] for r in data["ops"])
    image = tmp_path / "timeline.png"
    assert main(["plot", "--trace", str(trace), "--out", str(image), "--window", "0:50"]) == 0
    assert image.stat().st_size > 10_000 and image.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--steps", "0"], "--steps 0 must be >= 1"),
        (["--top", "0"], "--top 0 must be >= 1"),
        (["--micro-batches", "0"], "--micro-batches 0 must be >= 1"),
        (["--energy", "estimate:nosuch"], "--energy 'estimate:nosuch'"),
    ],
)
def test_profile_bad_options_are_one_line(run_file, capsys, argv, message):
    assert main(["profile", str(run_file()), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dsptrain: error:") and message in err[0], err


def test_plot_trace_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    for argv, message in (
        (["--trace", str(tmp_path / "none.json")], "no such trace file"),
        (["--trace", str(bad)], "not a JSON trace"),
        (["--trace", str(empty)], "no complete"),
        (["--trace", str(empty), "--window", "a:b"], "--window 'a:b'"),
        (["--window", "0:1", str(tmp_path)], "--window goes with --trace"),
    ):
        assert main(["plot", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)


def _scalars(logdir):
    """TensorBoard's own reader (event_accumulator) over a log directory: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_training_writes_csv_and_tensorboard_logs(trained):
    out = trained("csvrun", epochs=2)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "step"]
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert all(r["run"] == "csvrun" for r in records)
    with open(out / "steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [r["step"] for r in steps]
    assert [float(r["loss"]) for r in rows] == pytest.approx([r["loss"] for r in steps])
    with open(out / "epochs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["test_accuracy"]) for r in rows] == [r["test_accuracy"] for r in epochs]
    scalars = _scalars(out / "tensorboard")
    assert scalars["step/loss"] == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in steps]
    assert scalars["step/time_s"] == [(r["step"], pytest.approx(r["time_s"], rel=1e-6)) for r in steps]
    assert [v for _, v in scalars["epoch/test_accuracy"]] == pytest.approx([r["test_accuracy"] for r in epochs])
    assert [s for s, _ in scalars["epoch/test_accuracy"]] == [r["epoch"] for r in epochs]


def test_resumed_log_rebuilds_csv_and_purges_tensorboard(tmp_path):
    """A resumed run's CSV is metrics.jsonl's (cut back to the checkpoint), and TensorBoard is
    told to drop what the killed run logged after the resumed step (purge_step)."""
    log = RunLog(tmp_path, "r")
    for step in range(6):
        log.write({"kind": "step", "epoch": 1, "step": step, "loss": 10.0 - step})
    log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()[:3]  # resume.py cut it at step 3
    (tmp_path / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    log = RunLog(tmp_path, "r", fresh=False, global_step=3)
    for step in range(3, 5):
        log.write({"kind": "step", "epoch": 1, "step": step, "loss": 100.0 + step})
    log.close()
    with open(tmp_path / "steps.csv", newline="") as f:
        assert [(int(r["step"]), float(r["loss"])) for r in csv.DictReader(f)] == [
            (0, 10.0),
            (1, 9.0),
            (2, 8.0),
            (3, 103.0),
            (4, 104.0),
        ]
    assert _scalars(tmp_path / "tensorboard")["step/loss"] == [(0, 10.0), (1, 9.0), (2, 8.0), (3, 103.0), (4, 104.0)]


def test_plot_labels_runs_by_their_names(tmp_path, trained):
    """The legend names the run (its config's name), not the folder it was written to;
    two runs of one name are told apart by their folders."""
    from dsptrain.plot import plot_runs

    out = trained("named-run", epochs=1)
    first = out.rename(tmp_path / "folder-a")
    second = trained("named-run", epochs=1)
    fig = plot_runs([first, second], tmp_path / "plot.png")
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["named-run (tmp/folder-a)".replace("tmp", tmp_path.name), "named-run (runs/named-run)"], labels
