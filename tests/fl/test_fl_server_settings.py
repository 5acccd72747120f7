"""The federated server's round checkpoint carries its recipe's resolved settings, held to the
trainer's rules (resume.check_recipe_settings): a server resumed under other settings is refused
naming the file, key and both values (exit 2, one line); a checkpoint written before the server
stored them resumes with a `dsptrain: warning:`; a malformed field is refused by name."""

import subprocess
import sys

from dsptrain import checkpoint
from dsptrain.config.settings import recipe_settings
from dsptrain.fl.server import CHECKPOINT_NAME, HISTORY_NAME
from dsptrain.fl.settings import load_fl_run
from dsptrain.fl.simulate import simulate

SMALL = dict(clients=2, local_steps=2, train_limit=400, test_limit=100, min_available_clients=2)
OTHER = {"name": "niti", "optimizer": {"momentum": 0.5}}  # NITI's float layers' momentum: 0.9 shipped


def _cli(*args):
    argv = [sys.executable, "-m", "dsptrain.cli", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def _rewrite(path, change):
    state, meta = checkpoint.load(path)
    change(meta)
    checkpoint.save(path, state, {k: v for k, v in meta.items() if k not in ("format", "arrays")})


def test_the_round_checkpoint_stores_the_runs_resolved_settings(tmp_path, fl_config):
    path = fl_config(rounds=1, **SMALL)
    flrun = load_fl_run(path)
    simulate(flrun, path, tmp_path / "out")
    _, meta = checkpoint.load(tmp_path / "out" / CHECKPOINT_NAME)
    assert meta["round"] == 1
    assert meta["recipe_settings"] == recipe_settings(flrun.run.recipe)
    assert meta["recipe_settings"]["optimizer"]["momentum"] == 0.9


def test_a_server_resumed_under_other_settings_is_refused_by_name(tmp_path, fl_config):
    first = fl_config(rounds=1, **SMALL)
    out = tmp_path / "out"
    simulate(load_fl_run(first), first, out)
    ckpt = out / CHECKPOINT_NAME
    other = fl_config(rounds=2, recipe=OTHER, **SMALL)
    result = _cli("fl", "simulate", other, "--out", out)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"dsptrain: error: {ckpt}: recipe_settings.optimizer.momentum: 0.9: the checkpoint was trained with "
        f"this; this run's recipe has 0.5 (resume with the run's original recipe settings)"
    )
    _rewrite(ckpt, lambda meta: meta.update(recipe_settings="niti"))
    result = _cli("fl", "simulate", first, "--out", out)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"dsptrain: error: {ckpt}: recipe_settings: 'niti' is not a mapping of the recipe's settings"
    )


def test_an_older_server_checkpoint_resumes_with_a_warning(tmp_path, fl_config):
    first = fl_config(rounds=1, **SMALL)
    out = tmp_path / "out"
    simulate(load_fl_run(first), first, out)
    _rewrite(out / CHECKPOINT_NAME, lambda meta: meta.pop("recipe_settings"))
    more = fl_config(rounds=2, **SMALL)
    result = _cli("fl", "simulate", more, "--out", out)
    assert result.returncode == 0, result.stderr[-2000:]
    warned = [line for line in result.stderr.splitlines() if line.startswith("dsptrain: warning:")]
    assert warned == [
        f"dsptrain: warning: {out / CHECKPOINT_NAME}: written before checkpoints kept their recipe's settings; "
        f"continuing with this run's niti settings"
    ], result.stderr[-2000:]
    assert "resuming after round 1 of 2" in result.stderr
    _, meta = checkpoint.load(out / CHECKPOINT_NAME)
    assert meta["round"] == 2 and meta["recipe_settings"] == recipe_settings(load_fl_run(more).run.recipe)
    assert (out / HISTORY_NAME).exists()
