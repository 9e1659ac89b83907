"""scripts/services.sh from a checkout below a 0700 folder (as /root is): the real PostgreSQL and S3
server (and SeaweedFS's S3 and REST catalog) start, answer, and leave nothing behind; a service that
cannot start is named with its log.

As root the script runs PostgreSQL as the postgres user, which is the case these tests are about,
so they need root (CI and the development machine run as root). Each test uses free ports of its
own, so the services of the suite that runs them are never touched.
"""

from __future__ import annotations

import json
import os
import pwd
import random
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

# SeaweedFS: a table bucket, a namespace through the REST catalog, and where its servers listen.
keys = dict(aws_access_key_id=os.environ["TEST_SEAWEED_ACCESS_KEY_ID"],
            aws_secret_access_key=os.environ["TEST_SEAWEED_SECRET_ACCESS_KEY"], region_name="us-east-1")
boto3.client("s3tables", endpoint_url=os.environ["TEST_SEAWEED_S3_ENDPOINT"], **keys).create_table_bucket(name="probe")
from pyiceberg.catalog import load_catalog
rest = load_catalog("rest", type="rest", uri=os.environ["TEST_REST_URI"], warehouse="s3://probe/",
                    credential=keys["aws_access_key_id"] + ":" + keys["aws_secret_access_key"])
rest.create_namespace("probe_ns")
# This run's weed, told apart from other runs' by its REST catalog port.
flag = b"-s3.port.iceberg=" + os.environ["TEST_REST_URI"].rsplit(":", 1)[1].encode()
weed = []
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        if flag in open(f"/proc/{p}/cmdline", "rb").read().split(b"\\0"):
            weed.append(p)
    except OSError:  # a process that ended meanwhile
        pass
inodes = set()
for pid in weed:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
listening = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
            address, port = fields[1].split(":")
            listening.append([address, int(port, 16)])
import redis
broker = redis.Redis.from_url(os.environ["TEST_REDIS_URL"])
broker.set("probe", b"queued")
print(json.dumps({
    "redis": broker.get("probe").decode(), "redis_save": broker.config_get("save")["save"],
    "redis_appendonly": broker.config_get("appendonly")["appendonly"],
    "redis_bind": broker.config_get("bind")["bind"], "celery_port": os.environ["TEST_CELERY_PORT"],
    "database": database, "data_dir": data_dir, "socket_dir": socket_dir,
    "socket_dir_uid": info.st_uid, "socket_dir_mode": stat.S_IMODE(info.st_mode),
    "s3_body": s3.get_object(Bucket="probe", Key="k")["Body"].read().decode(),
    "rest_namespaces": rest.list_namespaces(), "weed_processes": len(weed), "weed_listening": sorted(listening),
    "rest_uri": os.environ["TEST_REST_URI"], "seaweed_s3": os.environ["TEST_SEAWEED_S3_ENDPOINT"],
}))
sys.exit(7)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_block(count: int = 10) -> int:
    """The first of ``count`` consecutive ports that are free now, outside the ephemeral range."""
    while True:
        base = random.randrange(21000, 32000)
        for port in range(base, base + count):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    break
        else:
            return base


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
    exported = (
        "TEST_PG_URL",
        "TEST_S3_ENDPOINT",
        "TEST_REST_URI",
        "TEST_SEAWEED_S3_ENDPOINT",
        "TEST_REDIS_URL",
        "TEST_CELERY_PORT",
        "TEST_AIRFLOW_PORT",
        "TMPDIR",
    )
    env = {k: v for k, v in os.environ.items() if k not in exported}
    env.update(TEST_PG_PORT=str(pg_port), TEST_S3_PORT=str(s3_port), VENV=str(venv))
    # Free ports for the emulators too, and the project's Azurite install rather than one a checkout.
    env.update(
        TEST_AZURITE_PORT=str(free_port()),
        TEST_GCS_PORT=str(free_port()),
        TEST_FAKE_GCS_PORT=str(free_port()),
        TEST_SEAWEED_PORT=str(free_block()),
        TEST_REDIS_PORT=str(free_port()),
        TEST_CELERY_PORT=str(free_block(4)),
        AZURITE_PREFIX=os.environ.get("AZURITE_PREFIX", str(SCRIPT.parents[1] / ".services" / "node")),
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
    env = env_for(pg_port, s3_port, tmpdir=home)
    seaweed = int(env["TEST_SEAWEED_PORT"])
    result = run(checkout, env, sys.executable, str(probe))

    assert result.returncode == 7, result.stderr  # the command's own exit status is passed on
    seen = json.loads(result.stdout)
    folder = Path(seen["socket_dir"])
    assert folder.parent == Path("/tmp") and folder.name.startswith(f"iceberg-maint-pg-{pg_port}.")
    assert seen["data_dir"] == f"{folder}/data"
    assert seen["socket_dir_uid"] == pwd.getpwnam("postgres").pw_uid
    assert seen["socket_dir_mode"] == 0o700
    assert seen["database"] == "iceberg_test"
    assert seen["s3_body"] == "hello"
    assert seen["rest_uri"] == f"http://127.0.0.1:{seaweed + 8}"
    assert seen["seaweed_s3"] == f"http://127.0.0.1:{seaweed + 6}"
    assert seen["rest_namespaces"] == [["probe_ns"]]
    # Redis: on loopback only, keeping nothing on disk; the Celery deployment's ports passed through.
    redis_port = int(env["TEST_REDIS_PORT"])
    assert (seen["redis"], seen["redis_save"], seen["redis_appendonly"]) == ("queued", "", "no")
    assert seen["redis_bind"] == "127.0.0.1"
    assert seen["celery_port"] == env["TEST_CELERY_PORT"]
    # One weed process, listening on loopback only: its 10 ports and the admin HTTP port the kernel picked.
    assert seen["weed_processes"] == 1
    loopback = "0100007F"  # 127.0.0.1 as /proc/net/tcp spells it
    assert {address for address, _ in seen["weed_listening"]} == {loopback}
    ports = {port for _, port in seen["weed_listening"]}
    assert set(range(seaweed, seaweed + 10)) <= ports and len(ports) == 11
    assert f"PostgreSQL on 127.0.0.1:{pg_port} (data in {folder})" in result.stderr
    # Everything is gone afterwards; the logs stay in the checkout's folder for this port pair.
    assert not folder.exists()
    assert not answers(pg_port) and not answers(s3_port)
    assert not any(answers(port) for port in range(seaweed, seaweed + 10))
    assert not answers(redis_port)
    assert list(Path("/tmp").glob(f"iceberg-maint-seaweed-{seaweed}.*")) == []
    assert [p for p in Path("/tmp").glob("seaweedfs-*.sock") if int(p.stem.rsplit("-", 1)[1]) in ports] == []
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
        "redis.log",
        "seaweed.log",
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
def test_seaweedfs_that_cannot_start_is_named_with_its_log_and_the_others_are_stopped(
    checkout: Path, tmp_path: Path
) -> None:
    # The real virtualenv's programs, but a weed that fails at once, as a broken install does.
    venv = tmp_path / "venv-broken-weed"
    (venv / "bin").mkdir(parents=True)
    for program in (VENV / "bin").iterdir():
        if program.name != "weed":
            (venv / "bin" / program.name).symlink_to(program)
    # Its python finds the real packages through pyvenv.cfg and lib/.
    shutil.copy2(VENV / "pyvenv.cfg", venv / "pyvenv.cfg")
    (venv / "lib").symlink_to(VENV / "lib")
    weed = venv / "bin" / "weed"
    weed.write_text("#!/bin/sh\necho 'weed: cannot allocate memory' >&2\nexit 1\n")
    weed.chmod(0o755)
    pg_port, s3_port = port_pair()
    env = env_for(pg_port, s3_port, venv=venv)
    seaweed = int(env["TEST_SEAWEED_PORT"])
    marker = tmp_path / "ran"
    result = run(checkout, env, "touch", str(marker))

    assert result.returncode == 1
    log = checkout / ".services" / f"{pg_port}-{s3_port}" / "seaweed.log"
    assert result.stderr.endswith(
        f"services: starting SeaweedFS (weed mini, its Iceberg REST catalog on 127.0.0.1:{seaweed + 8}) failed\n"
        f"services: last lines of {log}:\n"
        "    weed: cannot allocate memory\n"
        "services: it exited\n"
    )
    assert not marker.exists()
    assert pg_folders(pg_port) == [] and not answers(pg_port) and not answers(s3_port)
    assert list(Path("/tmp").glob(f"iceberg-maint-seaweed-{seaweed}.*")) == []


@needs_root
def test_interrupt_stops_both_services_and_removes_the_folder(checkout: Path) -> None:
    pg_port, s3_port = port_pair()
    env = env_for(pg_port, s3_port)
    seaweed = int(env["TEST_SEAWEED_PORT"])
    wait = "import time; print('ready', flush=True); time.sleep(600)"
    # A session of its own, so the Ctrl-C below reaches the script's group the way a terminal sends it;
    # Ctrl-C as a terminal has it, even under a runner started in the background (`cmd &`), which
    # ignores SIGINT and passes that on: bash can then not trap it, nor the wrapped command end on it.
    proc = subprocess.Popen(
        [str(checkout / "scripts" / "services.sh"), "run", "--", sys.executable, "-c", wait],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"  # blocks until the wrapped command runs
        folders = pg_folders(pg_port)
        assert len(folders) == 1 and answers(pg_port) and answers(s3_port)
        assert answers(seaweed + 8)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=300)  # five services stop one by one; a loaded machine is slow
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):  # closed on every path: an open pipe fails a later test
            if pipe is not None:
                pipe.close()

    assert proc.returncode == 130, stderr
    assert not folders[0].exists()
    assert not answers(pg_port) and not answers(s3_port)
    assert not any(answers(port) for port in range(seaweed, seaweed + 10))


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


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2003x", "services: TEST_SEAWEED_PORT must be a TCP port number (1-65535), got '2003x'\n"),
        ("65530", "services: TEST_SEAWEED_PORT is the first of 10 ports, so at most 65526, got '65530'\n"),
    ],
)
def test_bad_seaweed_port_gets_one_line_and_starts_nothing(checkout: Path, value: str, message: str) -> None:
    env = env_for(*port_pair())
    env["TEST_SEAWEED_PORT"] = value
    result = run(checkout, env, "true")

    assert (result.returncode, result.stdout, result.stderr) == (2, "", message)
    assert not (checkout / ".services").exists()


def test_a_seaweed_port_in_use_is_refused_before_anything_starts(checkout: Path, tmp_path: Path) -> None:
    pg_port, s3_port = port_pair()
    env = env_for(pg_port, s3_port)
    base = int(env["TEST_SEAWEED_PORT"])
    marker = tmp_path / "ran"
    with socket.socket() as taken:  # the REST catalog's port, held by another program
        taken.bind(("127.0.0.1", base + 8))
        taken.listen()
        result = run(checkout, env, "touch", str(marker))

    assert result.returncode == 1
    assert result.stderr == (
        f"services: port {base + 8} on 127.0.0.1 (TEST_SEAWEED_PORT {base} + 8) is already in use: "
        "set TEST_SEAWEED_PORT to the first of 10 free consecutive ports\n"
    )
    assert not marker.exists()
    assert pg_folders(pg_port) == [] and not answers(pg_port) and not answers(s3_port)


DEFAULT_S3_PORT = 55000  # scripts/services.sh's default for TEST_S3_PORT


@needs_root
def test_a_default_port_in_use_moves_to_a_free_one_so_two_runs_go_side_by_side(checkout: Path, tmp_path: Path) -> None:
    # Another run beside this one holds the default S3 port (here a listening socket stands for it; if a real run
    # already holds it, that is the same case).
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", DEFAULT_S3_PORT))
        holder.listen()
    except OSError:
        assert answers(DEFAULT_S3_PORT), "port 55000 can be neither bound nor reached"
    env = env_for(free_port(), DEFAULT_S3_PORT)
    del env["TEST_S3_PORT"]
    seen = tmp_path / "endpoint"
    try:
        result = run(checkout, env, "sh", "-c", f'echo "$TEST_S3_ENDPOINT $TEST_AIRFLOW_PORT" > {seen}')
    finally:
        holder.close()

    assert result.returncode == 0, result.stderr
    endpoint, airflow_port = seen.read_text().split()
    moved = int(endpoint.rsplit(":", 1)[1])
    assert moved != DEFAULT_S3_PORT
    assert f"this run uses TEST_S3_PORT={moved}" in result.stderr
    # The browser test's port, bound only later by that test, moves with the others.
    assert int(airflow_port) != 23080 and f"TEST_AIRFLOW_PORT={airflow_port}" in result.stderr
