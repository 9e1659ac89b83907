"""tests/watchdog.py, run as pytest runs it: a pytest process over a tiny test file, with a short limit.

A test past its limit fails with the stacks and the next test still runs and passes; what the test started is
gone when the run ends, whether its own clean-up stopped it or nothing did. SIGALRM handled and cleared the way
Airflow's task timeouts do it changes nothing. A test that cannot be interrupted (the signal blocked) meets the
last resort at ``timeout_backstop_factor`` times the limit: the run ends, its processes with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow  # a pytest process each

REPO = Path(__file__).resolve().parents[1]

TESTS = """
import os, signal, subprocess, sys, time

def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

def test_blocks():
    signal.signal(signal.SIGALRM, lambda *_: None)  # what an Airflow task timeout does on entry...
    signal.alarm(0)  # ...and on exit
    if os.environ.get("BLOCK"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # nothing can interrupt this test
    cleaned, leaked = _sleeper(), _sleeper()
    with open(os.environ["PIDS"], "w") as fh:
        fh.write(f"{cleaned.pid} {leaked.pid}")
    try:
        time.sleep(600)
    finally:
        cleaned.kill()
        cleaned.wait()

def test_next():
    pass
"""


def _run(tmp_path: Path, *, block: bool) -> tuple[subprocess.CompletedProcess[str], list[int], float]:
    (tmp_path / "test_tiny.py").write_text(TESTS)
    ini = ["timeout = 2", "timeout_method = thread", "timeout_backstop_factor = 3"]
    (tmp_path / "pytest.ini").write_text("\n".join(["[pytest]", *ini, "asyncio_default_fixture_loop_scope = function"]))
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIDS": str(pids), "BLOCK": "1" if block else ""}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.watchdog", "-p", "no:cacheprovider", "-q", "test_tiny.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, [int(p) for p in pids.read_text().split()], time.monotonic() - started


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_test_past_its_limit_fails_alone_and_the_run_goes_on(tmp_path: Path) -> None:
    done, pids, seconds = _run(tmp_path, block=False)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert "1 failed, 1 passed" in output, output[-3000:]
    assert "FAILED test_tiny.py::test_blocks" in output
    assert "Failed: Timeout: test_tiny.py::test_blocks passed its limit of 2 s" in output
    assert "time.sleep(600)" in output  # where the test was, from the main thread's traceback
    assert "watchdog: stopped 1 process(es) left by timed-out tests:" in output, output[-3000:]
    assert [pid for pid in pids if _running(pid)] == []
    assert seconds < 6 * 3, "the last resort (3 times the limit) ended the run, not the watchdog"


def test_a_test_that_cannot_be_interrupted_ends_the_run_with_its_processes(tmp_path: Path) -> None:
    done, pids, seconds = _run(tmp_path, block=True)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert "Timeout" in output and "test_next" not in output and "passed" not in output, output[-3000:]
    assert [pid for pid in pids if _running(pid)] == []
    assert seconds >= 6, "the run ended before the last resort's time (3 times the 2 s limit)"
