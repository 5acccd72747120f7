"""The command line: global options after the subcommand, run overrides, errors that name
the file and key with a suggestion, `plan` under a budget too small, current help."""

import json

import pytest
from dsptrain.cli import COMMANDS, build_parser, main


def test_debug_is_accepted_before_and_after_the_subcommand(run_file, capsys):
    bad = run_file("recipe: niti\nmodel: lenet\n")
    assert main(["train", str(bad)]) == 2
    assert main(["train", str(bad), "--quiet"]) == 2
    capsys.readouterr()
    for argv in (["--debug", "train", str(bad)], ["train", str(bad), "--debug"]):
        with pytest.raises(Exception, match="model.name"):  # --debug: the traceback, not one line
            main(argv)
    assert build_parser().parse_args(["info", "--debug"]).debug
    assert build_parser().parse_args(["--debug", "info"]).debug
    assert not build_parser().parse_args(["info"]).debug


def test_train_overrides_batch_size_and_limits(run_file, tmp_path):
    out = tmp_path / "out"
    argv = [
        "train",
        str(run_file()),
        "--quiet",
        "--out",
        str(out),
        "--batch-size",
        "32",
        "--train-limit",
        "100",
        "--test-limit",
        "50",
        "--epochs",
        "1",
    ]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["batch"] for r in records if r["kind"] == "step"] == [32, 32, 32, 4]
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1]


def test_a_bad_energy_flag_is_refused_by_name(run_file, capsys):
    assert main(["train", str(run_file()), "--energy", "trace"]) == 2
    assert capsys.readouterr().err.strip() == (
        "dsptrain: error: --energy 'trace' is not one of auto | rapl | battery | trace:FILE | estimate[:DEVICE]"
    )


@pytest.mark.parametrize("flag", ["--batch-size", "--train-limit", "--test-limit", "--epochs"])
def test_overrides_below_one_are_refused_by_name(run_file, capsys, flag):
    assert main(["train", str(run_file()), flag, "0"]) == 2
    assert capsys.readouterr().err.strip() == f"dsptrain: error: {flag} 0 must be >= 1"


def test_model_shorthand_is_the_mapping(run_file):
    import dsptrain

    short = dsptrain.load_run(run_file("recipe: niti\nmodel: vgg_small\n", "short"))
    long = dsptrain.load_run(run_file("recipe: niti\nmodel: {name: vgg_small}\n", "long"))
    assert short.model == long.model and short.model.name == "vgg_small"


@pytest.mark.parametrize(
    "text, key, hint",
    [
        ("recipe: niti\nmodel: lenet\n", "model.name", "did you mean 'lenet5'?"),
        ("recipe: nitti\n", "recipe", "did you mean 'niti'?"),
        (
            "recipe: niti\nenergy: estimate:pixel9\n",
            "energy",
            "no coefficients for device 'pixel9' (known: sd865, x86)",
        ),
        ("recipe: niti\nenergy: rapel\n", "energy", "'rapel' is not one of auto | rapl"),
        (
            "recipe: niti\ndata: {dataset: synthetic}\nmodel: {name: grouped, input_shape: [8, 8, 4], layers: "
            "[{kind: conv, out: 4, kernel: 3, groups: 3}, {kind: flatten}, {kind: linear, out: 10}]}\n",
            "model.layers[0]",
            "conv1: groups 3 does not divide 4 input and 4 output channels",
        ),
        (
            "recipe: niti\ndata: {dataset: fashion-mnist, path: /nonexistent/fm}\n",
            "data.path",
            "leave data.path out to use /usr/share/datasets/fashion-mnist from the Debian package dataset-fashion-mnist",
        ),
        (
            "recipe: niti\nmodel: lenet5\ndata: {dataset: synthetic}\nmemory: {budget: 100KB}\n",
            "memory.budget",
            "the smallest feasible budget is",
        ),
    ],
)
def test_errors_name_the_file_and_key_and_suggest(run_file, capsys, tmp_path, text, key, hint):
    path = run_file(text)
    assert main(["train", str(path), "--out", str(tmp_path / "o"), "--backend", "ref"]) == 2  # not --quiet
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"dsptrain: error: {path}: {key}: "), err
    assert hint in err[0]


def test_plan_under_too_small_a_budget_prints_the_breakdown_and_the_smallest_that_fits(run_file, capsys):
    path = run_file("recipe: niti\nmodel: lenet5\nmemory: {budget: 100KB}\n")
    assert main(["plan", str(path), "--backend", "ref", "--batch-size", "16"]) == 2
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("budget 100.0 KB (fixed): too small"))
    assert "the smallest budget that fits is" in lines[at]
    assert lines[at + 1].lstrip().startswith("peak") and "activations" in "\n".join(lines[at + 1 : at + 9])
    assert "the budget covers what the planner places" in captured.out
    assert captured.err.startswith(f"dsptrain: error: {path}: memory.budget: memory budget 100.0 KB")
    assert main(["plan", str(path), "--backend", "ref", "--budget", "50KB"]) == 2
    assert capsys.readouterr().err.startswith("dsptrain: error: --budget 50KB: ")


def test_help_lists_every_command_and_nothing_for_later(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "later" not in text
    for name in COMMANDS:
        assert name in text
