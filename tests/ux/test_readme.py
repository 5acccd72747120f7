"""The README cannot rot: its Python blocks run as printed, every `dsptrain` and bench
command it shows uses options that exist, and every environment variable the code reads
is in its table."""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dsptrain.backends.ops_cpu import CpuBackend
from dsptrain.cli import build_parser
from dsptrain.data import FASHION_MNIST_DIR, FASHION_MNIST_PACKAGE

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README) if lang == language]


def command_lines() -> list[str]:
    """Shell lines of the README: its sh blocks, and inline `code` that runs dsptrain or a bench."""
    lines = [line for body in blocks("sh") for line in body.splitlines()]
    prose = FENCE.sub("", README)
    lines += [span for span in re.findall(r"`([^`\n]+)`", prose) if re.search(r"(^|/)dsptrain \w|bench/\w+\.py", span)]
    return [line.split("  #")[0] for line in lines]


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def _subparsers(parser: argparse.ArgumentParser) -> dict:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_there_is_something_to_check():
    assert blocks("python") and any("dsptrain train" in line for line in command_lines())


def test_dsptrain_commands_in_the_readme_use_options_that_exist():
    parser = build_parser()
    commands = _subparsers(parser)
    checked = 0
    for line in command_lines():
        for match in re.finditer(r"(?:^|[\s/])dsptrain ((?:--?[\w-]+ )*)(\w[\w-]*)(.*?)(?=&&|\||;|$)", line):
            pre, name, rest = match.groups()
            if name not in commands:
                if name.endswith(".yaml") or "/" in name:
                    continue
                pytest.fail(f"README: `{line.strip()}`: no subcommand {name!r} (have {', '.join(commands)})")
            known = _options(commands[name]) | _options(parser)
            for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", pre + rest):
                assert flag in known, f"README: `{line.strip()}`: dsptrain {name} has no option {flag}"
                checked += 1
    assert checked > 10


def test_bench_commands_in_the_readme_use_options_that_exist():
    scripts: dict[str, set[str]] = {}
    for line in command_lines():
        for script, rest in re.findall(r"(bench/\w+\.py)((?: +[^\s`|;&]+)*)", line):
            scripts.setdefault(script, set()).update(re.findall(r"(?<![\w-])(--[a-zA-Z][\w-]*)", rest))
    assert scripts
    for script, flags in scripts.items():
        assert (ROOT / script).exists(), f"README names {script}, which does not exist"
        if not flags:
            continue
        done = subprocess.run(
            [sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert done.returncode == 0, f"{script} --help: {done.stderr[-1000:]}"
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", done.stdout), (
                f"README: {script} has no option {flag}"
            )


def test_every_environment_variable_the_code_reads_is_in_the_docs_table():
    table = (ROOT / "docs" / "environment.md").read_text()  # the README links it
    listed = set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)", table, re.M))
    read = set()
    sources = [*(ROOT / "runtime").rglob("*.py"), ROOT / "setup.py"]
    for path in sources:
        text = path.read_text()
        read |= set(re.findall(r"\"(DSPTRAIN_[A-Z0-9_]+)\"", text))
        read |= set(re.findall(r"environ(?:\.get)?[\[(]\s*\"([A-Z][A-Z0-9_]*)\"", text))
        read |= set(re.findall(r"\"([A-Z][A-Z0-9_]*)\" in os\.environ", text))
    for path in [
        *(ROOT / "cpu_ops").rglob("*.cpp"),
        *(ROOT / "cpu_ops").rglob("*.h"),
        *(ROOT / "dsp_kernels").rglob("*.c"),
    ]:
        read |= set(re.findall(r"getenv\(\"([A-Z][A-Z0-9_]*)\"\)", path.read_text()))
    assert {"DSPTRAIN_DEBUG", "DSPTRAIN_CPU_THREADS", "DSPTRAIN_NATIVE_DEBUG"} <= read  # the scan finds them
    assert read <= listed, f"read by the code but not in docs/environment.md's table: {sorted(read - listed)}"
    assert "docs/environment.md" in README


@pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built (the snippet trains an epoch)")
def test_python_blocks_run_as_printed(tmp_path, need_tools):
    need_tools(
        [] if FASHION_MNIST_DIR.is_dir() else [FASHION_MNIST_PACKAGE], f"apt-get install {FASHION_MNIST_PACKAGE}"
    )
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # the snippets run from the repository's root
    env = {**os.environ, "MPLBACKEND": "Agg"}
    import importlib.util

    ran = 0
    for number, code in enumerate(blocks("python"), 1):
        # a block for an optional extra (torch: the bench extra) runs where it is installed
        # (tests/interchange checks the torch bridge's own README block)
        optional = [
            m for m in re.findall(r"^import (\w+)", code, re.M) if m in ("torch", "onnx", "onnxruntime", "flwr")
        ]
        if any(
            importlib.util.find_spec(m) is None
            or subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True).returncode
            for m in optional
        ):
            continue
        ran += 1
        script = tmp_path / f"readme_{number}.py"
        script.write_text(code)
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
        )
        assert done.returncode == 0, f"README python block {number} failed:\n{code}\n{done.stderr[-3000:]}"
    assert ran and (tmp_path / "runs" / "from-python" / "checkpoint.npz").exists()


def test_the_first_screen_says_what_runs_where():
    first = "\n".join(README.splitlines()[:30]).lower()
    assert "more to come" not in README
    for words in ("seven ship", "emulated", "qemu-hexagon", "fastrpc", "never run on one", "estimate"):
        assert words in first, words
