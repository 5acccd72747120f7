"""DSPTRAIN_* variables: one table, each parsed; a bad value is one error line naming it."""

import re
from pathlib import Path

import pytest
from dsptrain.inputs import env

from .conftest import write_run
from .harness import Case, check_cases, report

BAD = {
    "DSPTRAIN_DEBUG": ["maybe", "2"],
    "DSPTRAIN_CPU_ONLY_OPS": ["(unclosed", "*"],
    "DSPTRAIN_CPU_ISA": ["sse9", ""],
    "DSPTRAIN_CPU_THREADS": ["0", "-3", "many", "1e3", "99999"],
    "DSPTRAIN_BLAS_THREADS": ["0", "all"],
    "DSPTRAIN_BUILD_JOBS": ["-1", "lots"],
    "DSPTRAIN_DSP": ["gpu", "EMULATED"],
    "DSPTRAIN_DSP_TIMEOUT": ["0", "-1", "nan", "inf", "soon", "1e9"],
    "DSPTRAIN_DSP_ARENA_MB": ["0", "lots", "1.5", "10000000"],
    "DSPTRAIN_DSP_KERNELS": ["/nonexistent", ""],
    "DSPTRAIN_CACHE": ["/etc/passwd", ""],
    "DSPTRAIN_CDSPRPC": ["/nonexistent/libcdsprpc.so", ""],
    "DSPTRAIN_NATIVE_DEBUG": ["please"],
}


def test_every_variable_has_bad_values_tested():
    assert set(BAD) == set(env.VARIABLES)


def test_bad_environment_values_are_refused(tmp_path):
    config = write_run(tmp_path / "run.yaml")
    cases = [
        Case(
            f"{name}={value!r}",
            ["train", str(config), "--out", str(tmp_path / "out"), "--quiet"],
            ("environment", name, repr(value)),
            env={name: value},
        )
        for name, values in BAD.items()
        for value in values
    ]
    failures = check_cases(cases)
    assert not failures, report(failures, len(cases))


def test_the_docs_table_lists_exactly_these_variables():
    table = (Path(__file__).resolve().parents[2] / "docs" / "environment.md").read_text()
    listed = set(re.findall(r"^\| `(DSPTRAIN_[A-Z_]+)", table, re.MULTILINE))
    assert listed == set(env.VARIABLES)


@pytest.mark.parametrize("name", sorted(env.VARIABLES))
def test_defaults_parse(name):
    assert env.get(name, environ={}) == env.VARIABLES[name].default
