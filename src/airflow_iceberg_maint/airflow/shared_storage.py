"""What one task hands another, or the api-server reads, must be where every host reaches it.

Under a local executor (``LocalExecutor``, ``SequentialExecutor``, ``DebugExecutor``; ``dag.test()``)
every task of a run shares one machine's disk. Under any other (Celery, Kubernetes, Edge...) the
tasks of one run land on different hosts, and the api-server and the triggerer on others again: a
file one task writes to its local disk is not there for the next task, a retry on another worker,
or the status page. So, when an executor that is not local is configured:

* the report location (``report_location`` or ``[iceberg_maint] report_location``) must be object
  storage: it holds the reports the status page and the reviewed flow read, the sharded orphan
  scan's scratch folder its shard, match and finish tasks exchange, and the catalog pass the
  planning task shares with the removal tasks;
* ``state_url`` must not be a SQLite file: the cleanup state and the leases in it must be the same
  for every worker (a server database, or no ``state_url``: Airflow Variables in the metadata database).

Either is refused with one line naming the setting, the value and the executor, before anything is
read or deleted. Spill folders (``TMPDIR``) stay local: each is used within one task only.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from airflow.configuration import conf

from airflow_iceberg_maint.errors import InvalidInputError

#: Executors that run every task of a run on the scheduler's machine.
LOCAL_EXECUTORS = frozenset({"LocalExecutor", "SequentialExecutor", "DebugExecutor"})


def executor_names(configured: str | None = None) -> list[str]:
    """The class names of ``[core] executor`` (a list: Airflow's multiple executors; ``alias:module.Class`` too)."""
    raw = conf.get("core", "executor", fallback="") if configured is None else configured
    names = []
    for part in (raw or "").split(","):
        path = part.strip().rsplit(":", 1)[-1].strip()
        if path:
            names.append(path.rsplit(".", 1)[-1])
    return names


def distributed_executor(configured: str | None = None) -> str | None:
    """The first configured executor that may run a run's tasks on other hosts; None when every one is local."""
    return next((name for name in executor_names(configured) if name not in LOCAL_EXECUTORS), None)


def is_local_uri(uri: str) -> bool:
    """A path on this machine's disk: no scheme (``/x``, ``reports``) or ``file:``."""
    return urlsplit(uri.strip()).scheme.lower() in ("", "file")


def require_shared_location(uri: str, what: str, setting: str, configured: str | None = None) -> None:
    """Refuse a local ``uri`` for ``what`` when the executor is not local (``setting``: what to change)."""
    executor = distributed_executor(configured)
    if executor is not None and is_local_uri(uri):
        raise InvalidInputError(
            f"{what} {uri!r}: on this worker's local disk, but the executor {executor} runs a run's tasks on "
            f"other hosts, which cannot read it; set {setting} to object storage (s3://, gs://, abfss://...)"
        )


def require_shared_state(url: str | None, configured: str | None = None) -> str | None:
    """``url`` itself, refused when it is a SQLite file and the executor is not local."""
    executor = distributed_executor(configured)
    if url and executor is not None and urlsplit(url.strip()).scheme.lower().split("+", 1)[0] == "sqlite":
        raise InvalidInputError(
            f"state_url {url!r}: a SQLite file on this worker's local disk, but the executor {executor} runs "
            "tasks on other hosts, each of which would keep its own cleanup state and leases; set "
            "[iceberg_maint] state_url to a database server every worker reaches, or unset it (Airflow Variables)"
        )
    return url
