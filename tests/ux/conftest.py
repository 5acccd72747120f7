"""Fixtures of the what-a-user-sees tests: small runs on synthetic data, run files."""

import textwrap

import dsptrain
import pytest


@pytest.fixture
def run_file(tmp_path):
    """`run_file(text)`: a run config in tmp_path, LeNet-5 + NITI on synthetic data by default."""

    def make(text="", name="run"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            textwrap.dedent(text)
            or textwrap.dedent("""\
            recipe: niti
            model: lenet5
            data: {dataset: synthetic, train_limit: 160, test_limit: 64}
            train: {epochs: 1, batch_size: 64, eval_batch_size: 64}
            backend: ref
            energy: estimate
            """)
        )
        return path

    return make


@pytest.fixture
def trained(tmp_path, run_file):
    """`trained(name, recipe, epochs)`: train a small synthetic run; returns its output directory."""

    def make(name="niti", recipe="niti", epochs=2):
        path = run_file(
            f"""\
            recipe: {recipe}
            model: lenet5
            data: {{dataset: synthetic, train_limit: 160, test_limit: 64}}
            train: {{epochs: {epochs}, batch_size: 64, eval_batch_size: 64}}
            backend: ref
            energy: estimate
            """,
            name,
        )
        out = tmp_path / "runs" / name
        trainer = dsptrain.Trainer(dsptrain.load_run(path), out_dir=out, progress=False)
        try:
            trainer.fit()
        finally:
            trainer.close()
        return out

    return make
