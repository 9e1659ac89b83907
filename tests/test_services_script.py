"""scripts/services.sh from a checkout below a 0700 folder (as /root is): the real PostgreSQL and S3
server start, answer, and leave nothing behind; a service that cannot start is named with its log.

As root the script runs PostgreSQL as the postgres user, which is the case these tests are about,
so they need root (CI and the development machine run as root). Each test uses free ports of its
own, so the services of the suite that runs them are never touched.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "services.sh"
VENV = Path(sys.prefix)  # the virtualenv running the tests has moto_server, psycopg2 and boto3
# It starts PostgreSQL and the S3 server itself (minutes, Debian's packages): not a unit test.
pytestmark = [pytest.mark.postgres, pytest.mark.s3]
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: the script runs PostgreSQL as the postgres user only when root"
)

# Run as the wrapped command: talks to both services and reports what it saw.
PROBE = """
import json, os, stat, sys
import boto3, psycopg2

url = os.environ["TEST_PG_URL"]
assert url.startswith("postgresql+psycopg2://postgres@127.0.0.1:"), url
conn = psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://"))
with conn, conn.cursor() as cur:
    cur.execute("select current_database(), current_setting('data_directory'),"
                " current_setting('unix_socket_directories')")
    database, data_dir, socket_dir = cur.fetchone()
conn.close()
info = os.stat(socket_dir)
s3 = boto3.client("s3", endpoint_url=os.environ["TEST_S3_ENDPOINT"], aws_access_key_id="testing",
                  aws_secret_access_key="testing", region_name="us-east-1")
s3.create_bucket(Bucket="probe")
s3.put_object(Bucket="probe", Key="k", Body=b"hello")
print(json.dumps({
    "database": database, "data_dir": data_dir, "socket_dir": socket_dir,
    "socket_dir_uid": info.st_uid, "socket_dir_mode": stat.S_IMODE(info.st_mode),
    "s3_body": s3.get_object(Bucket="probe", Key="k")["Body"].read().decode(),
}))
sys.exit(7)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_pair() -> tuple[int, int]:
    pg = free_port()
    s3 = free_port()
    while s3 == pg:
        s3 = free_port()
    return pg, s3


def answers(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pg_folders(pg_port: int) -> list[Path]:
    return sorted(Path("/tmp").glob(f"iceberg-maint-pg-{pg_port}.*"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home0700"
    path.mkdir()
    path.chmod(0o700)
    return path


@pytest.fixture
def checkout(home: Path) -> Path:
    """Just the script (and the GCS emulator launcher it runs), in a checkout the postgres user cannot enter."""
    root = home / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(SCRIPT, root / "scripts" / "services.sh")
    shutil.copy2(SCRIPT.parent / "gcs_emulator.py", root / "scripts" / "gcs_emulator.py")
    return root


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listening socket on a free port, standing for whatever program already holds it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def env_for(pg_port: int, s3_port: int, *, venv: Path = VENV, tmpdir: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TEST_PG_URL", "TEST_S3_ENDPOINT", "TMPDIR")}
    env.update(TEST_PG_PORT=str(pg_port), TEST_S3_PORT=str(s3_port), VENV=str(venv))
    # Free ports for the emulators too, and the project's Azurite install rather than one a checkout.
    env.update(
        TEST_AZURITE_PORT=str(free_port()),
        TEST_GCS_PORT=str(free_port()),
        TEST_FAKE_GCS_PORT=str(free_port()),
        AZURITE_PREFIX=str(SCRIPT.parents[1] / ".services" / "node"),
    )
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return env


def run(checkout: Path, env: dict[str, str], *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(checkout / "scripts" / "services.sh"), "run", "--", *cmd],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )


@needs_root
def test_services_answer_from_checkout_below_0700_folder(checkout: Path, home: Path, tmp_path: Path) -> None:
    pg_port, s3_port = port_pair()
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    # TMPDIR inside the 0700 folder too: the postgres user cannot reach it, so the script must use /tmp.
    result = run(checkout, env_for(pg_port, s3_port, tmpdir=home), sys.executable, str(probe))

    assert result.returncode == 7, result.stderr  # the command's own exit status is passed on
    seen = json.loads(result.stdout)
    folder = Path(seen["socket_dir"])
    assert folder.parent == Path("/tmp") and folder.name.startswith(f"iceberg-maint-pg-{pg_port}.")
    assert seen["data_dir"] == f"{folder}/data"
    assert seen["socket_dir_uid"] == pwd.getpwnam("postgres").pw_uid
    assert seen["socket_dir_mode"] == 0o700
    assert seen["database"] == "iceberg_test"
    assert seen["s3_body"] == "hello"
    assert f"PostgreSQL on 127.0.0.1:{pg_port} (data in {folder})" in result.stderr
    # Everything is gone afterwards; the logs stay in the checkout's folder for this port pair.
    assert not folder.exists()
    assert not answers(pg_port) and not answers(s3_port)
    logs = checkout / ".services" / f"{pg_port}-{s3_port}"
    assert sorted(p.name for p in logs.iterdir()) == [
        "azurite.log",
        "fake-gcs.log",
        "gcs.log",
        "moto.log",
        "pg-createdb.log",
        "pg-ctl.log",
        "pg-initdb.log",
        "pg-server.log",
    ]


@needs_root
def test_pg_port_in_use_names_pg_ctl_start_and_shows_server_log(
    checkout: Path, tmp_path: Path, listener: socket.socket
) -> None:
    pg_port = listener.getsockname()[1]
    s3_port = free_port()
    marker = tmp_path / "ran"
    result = run(checkout, env_for(pg_port, s3_port), "touch", str(marker))

    assert result.returncode == 1
    assert f"services: starting PostgreSQL (pg_ctl start on 127.0.0.1:{pg_port}) failed" in result.stderr
    server_log = checkout / ".services" / f"{pg_port}-{s3_port}" / "pg-server.log"
    assert f"services: last lines of {server_log}:" in result.stderr
    assert 'could not bind IPv4 address "127.0.0.1": Address already in use' in result.stderr
    assert f"services: port {pg_port} on 127.0.0.1 is already in use: set TEST_PG_PORT to a free port" in result.stderr
    assert not marker.exists()
    assert pg_folders(pg_port) == []
    assert not answers(s3_port)


@needs_root
def test_s3_port_in_use_is_refused_before_anything_starts(
    checkout: Path, tmp_path: Path, listener: socket.socket
) -> None:
    pg_port = free_port()
    s3_port = listener.getsockname()[1]
    marker = tmp_path / "ran"
    result = run(checkout, env_for(pg_port, s3_port), "touch", str(marker))

    assert result.returncode == 1
    assert result.stderr == (
        f"services: S3 server port {s3_port} on 127.0.0.1 is already in use: set TEST_S3_PORT to a free port\n"
    )
    assert not marker.exists()
    assert pg_folders(pg_port) == []
    assert not answers(pg_port)


@needs_root
def test_moto_that_cannot_start_is_named_with_its_log_and_postgres_is_stopped(checkout: Path, tmp_path: Path) -> None:
    # A virtualenv whose moto_server fails at once, as a broken install does; the only stand-in here.
    venv = tmp_path / "broken-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(VENV / "bin" / "python")
    moto = venv / "bin" / "moto_server"
    moto.write_text("#!/bin/sh\necho 'ImportError: cannot import name Flask' >&2\nexit 1\n")
    moto.chmod(0o755)
    pg_port, s3_port = port_pair()
    marker = tmp_path / "ran"
    result = run(checkout, env_for(pg_port, s3_port, venv=venv), "touch", str(marker))

    assert result.returncode == 1
    moto_log = checkout / ".services" / f"{pg_port}-{s3_port}" / "moto.log"
    assert result.stderr.endswith(
        f"services: starting the S3 server (moto_server on 127.0.0.1:{s3_port}) failed\n"
        f"services: last lines of {moto_log}:\n"
        "    ImportError: cannot import name Flask\n"
        "services: moto_server exited\n"
    )
    assert not marker.exists()
    # PostgreSQL had started: it is stopped and its folder removed.
    assert pg_folders(pg_port) == []
    assert not answers(pg_port)


@needs_root
def test_interrupt_stops_both_services_and_removes_the_folder(checkout: Path) -> None:
    pg_port, s3_port = port_pair()
    wait = "import time; print('ready', flush=True); time.sleep(600)"
    # A session of its own, so the Ctrl-C below reaches the script's group the way a terminal sends it.
    proc = subprocess.Popen(
        [str(checkout / "scripts" / "services.sh"), "run", "--", sys.executable, "-c", wait],
        env=env_for(pg_port, s3_port),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"  # blocks until the wrapped command runs
        folders = pg_folders(pg_port)
        assert len(folders) == 1 and answers(pg_port) and answers(s3_port)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert proc.returncode == 130, stderr
    assert not folders[0].exists()
    assert not answers(pg_port) and not answers(s3_port)


@pytest.mark.parametrize(
    ("pg", "s3", "message"),
    [
        ("5543x", "55000", "services: TEST_PG_PORT must be a TCP port number (1-65535), got '5543x'\n"),
        ("55432", "70000", "services: TEST_S3_PORT must be a TCP port number (1-65535), got '70000'\n"),
        ("55432", "55432", "services: TEST_PG_PORT and TEST_S3_PORT must differ, both are 55432\n"),
    ],
)
def test_bad_ports_get_one_line_and_start_nothing(checkout: Path, pg: str, s3: str, message: str) -> None:
    env = env_for(0, 0)
    env.update(TEST_PG_PORT=pg, TEST_S3_PORT=s3)
    result = run(checkout, env, "true")

    assert (result.returncode, result.stdout, result.stderr) == (2, "", message)
    assert not (checkout / ".services").exists()
