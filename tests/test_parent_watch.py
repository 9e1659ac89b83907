"""Forked workers end when the process that forked them is killed with -9, instead of waiting for ever.

Each case runs a process that forks its workers and gives them work that never ends; the test kills
that process once the workers are at work, then waits for every worker to be gone. Without the watch
they live on (here in their endless task; workers left idle wait on their task queue for ever).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

HANG = """
    import os, sys, time
    from pathlib import Path

    record = Path(sys.argv[1])

    def hang(*args):
        (record / str(os.getpid())).touch()
        time.sleep(3600)
"""
MANIFEST_POOL = """
    from pyiceberg.io import load_file_io
    from airflow_iceberg_maint.reachability.manifest_pool import ManifestPool

    if __name__ == "__main__":
        pool = ManifestPool(load_file_io({}, "file:///tmp"), "file:///tmp", 2)
        assert pool.start_method == "fork"
        pool.read_chunks(hang, ["a", "b"])
        time.sleep(3600)
"""
GROUP_READS = """
    from airflow_iceberg_maint.compaction import group_reads

    if __name__ == "__main__":
        group_reads._worth_forking = lambda table, paths: True  # no table: the pool alone
        pool = group_reads._executor(None, None, (), 2)
        assert pool is not None
        pool.submit(hang)
        pool.submit(hang)
        time.sleep(3600)
"""


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie its new parent has not reaped yet."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("body", [MANIFEST_POOL, GROUP_READS], ids=["manifest-pool", "group-reads"])
def test_forked_workers_end_when_their_parent_is_killed(tmp_path: Path, body: str) -> None:
    script = tmp_path / "forks.py"
    script.write_text(textwrap.dedent(HANG) + textwrap.dedent(body))
    with (tmp_path / "stderr.txt").open("wb") as err:
        parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stderr=err)
    try:
        _wait_for(lambda: len(list(tmp_path.glob("[0-9]*"))) == 2 or parent.poll() is not None, "two workers")
        assert parent.poll() is None, (tmp_path / "stderr.txt").read_text()
        workers = [int(p.name) for p in tmp_path.glob("[0-9]*")]
        assert os.getpid() not in workers and parent.pid not in workers
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        _wait_for(lambda: all(_gone(w) for w in workers), "the workers to end")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


SECOND_FORK_FAILS = """
from pyiceberg.io import load_file_io
from airflow_iceberg_maint.reachability.manifest_pool import ManifestPool
from tests.support.fork_faults import fail_second_fork

fail_second_fork()
try:
    ManifestPool(load_file_io({}, "file:///tmp"), "file:///tmp", 2)
except OSError as exc:
    print("refused:", exc)
"""


def test_a_pool_whose_second_fork_fails_ends_its_first_worker_and_the_process_exits() -> None:
    """The caller (``ReferenceWalk``) reads in its own process then; before, the first worker waited for ever
    and the process hung at exit."""
    done = subprocess.run(
        [sys.executable, "-c", SECOND_FORK_FAILS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.startswith("refused: [Errno 11]"), done.stderr
