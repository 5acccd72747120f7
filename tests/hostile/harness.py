"""Running the command on hostile input: in-process through cli.main() (fast), or as a
subprocess (the exit status and the absence of tracebacks, as a user sees them).

Every case must end with exit status 2, exactly one `dsptrain: error:` line that holds
the pieces the generator names (file, key, value), no traceback, within CASE_SECONDS.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dsptrain import cli

CASE_SECONDS = 10  # generous for a loaded 2-core machine; a refusal takes milliseconds
ERROR = "dsptrain: error:"


@dataclass
class Case:
    """One hostile input: the argv after `dsptrain`, and what the error line must hold."""

    label: str
    argv: list[str]
    needles: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout()


def run_in_process(case: Case) -> tuple[int, str, float]:
    """(exit status, stderr, seconds) of cli.main(case.argv), under a SIGALRM deadline."""
    err, out = io.StringIO(), io.StringIO()
    old_env = {k: os.environ.get(k) for k in case.env}
    os.environ.update(case.env)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    started = time.monotonic()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = cli.main(case.argv)
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 1
            except CaseTimeout:
                code = "timeout"
            except BaseException:  # a traceback the user would see
                import traceback

                traceback.print_exc(file=err)
                code = "traceback"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, err.getvalue(), time.monotonic() - started


def problem(case: Case, code, stderr: str) -> str | None:
    """Why the outcome breaks the contract, or None."""
    lines = [line for line in stderr.splitlines() if line.startswith(ERROR)]
    if code != 2:
        return f"{case.label}: exit {code!r}, expected 2; stderr:\n{stderr[-1500:]}"
    if "Traceback" in stderr:
        return f"{case.label}: traceback:\n{stderr[-1500:]}"
    if len(lines) != 1:
        return f"{case.label}: {len(lines)} error lines, expected 1:\n{stderr[-1500:]}"
    missing = [n for n in case.needles if n not in lines[0]]
    if missing:
        return f"{case.label}: error line lacks {missing}: {lines[0]}"
    return None


def check_cases(cases: list[Case]) -> list[str]:
    failures = []
    for case in cases:
        code, stderr, _ = run_in_process(case)
        why = problem(case, code, stderr)
        if why:
            failures.append(why)
    return failures


def check_subprocesses(cases: list[Case], cwd: Path) -> list[str]:
    """The same contract for `python -m dsptrain.cli`, the cases run side by side."""
    procs = []
    for case in cases:
        env = {**os.environ, **case.env}
        procs.append(
            (
                case,
                subprocess.Popen(
                    [sys.executable, "-m", "dsptrain.cli", *case.argv],
                    cwd=cwd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    failures = []
    for case, proc in procs:
        try:
            _, stderr = proc.communicate(timeout=CASE_SECONDS * 6)  # interpreter start-up on a loaded machine
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            failures.append(f"{case.label}: subprocess did not finish")
            continue
        why = problem(case, proc.returncode, stderr)
        if why:
            failures.append("subprocess " + why)
    return failures


def report(failures: list[str], total: int) -> str:
    return f"{len(failures)} of {total} cases failed:\n" + "\n\n".join(failures[:15])
