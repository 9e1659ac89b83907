"""``--cache-location`` and ``--no-cache`` of ``orphans`` and ``expire-snapshots`` (S22), as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.orphans.test_cli import _env, _run, _table_with_orphan


def _stored(folder: Path) -> set[str]:
    return {p.name for p in folder.rglob("*.*")} if folder.exists() else set()


def test_the_cache_options_change_where_digests_go_and_never_the_result(tmp_path: Path) -> None:
    orphan = _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    default = tmp_path / "digests"  # beside the state store's SQLite file (ICEBERG_MAINT_STATE_URL, tests' conftest)
    chosen = tmp_path / "chosen"
    outputs = []
    for args in (["--no-cache"], [], ["--cache-location", f"file://{chosen}"], []):
        done = _run(env, "orphans", "db.t", "--dry-run", "--json", *args)
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout)["orphan_files"])
        if args == ["--no-cache"]:
            assert _stored(default) == set()
    assert outputs == [[f"file://{orphan}"]] * 4
    assert {name.rpartition(".")[2] for name in _stored(default)} == {"list", "manifest"}
    assert _stored(chosen) == _stored(default)

    for args in (["--no-cache"], ["--cache-location", str(chosen)]):
        done = _run(env, "expire-snapshots", "db.t", "--dry-run", "--json", *args)
        assert done.returncode == 0, done.stderr


def test_a_bad_cache_option_gets_a_one_line_error(tmp_path: Path) -> None:
    _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    cases = [
        (["--cache-location", "s3://bucket/digests"], "cache location 's3://bucket/digests': expected a local folder"),
    ]
    for command in ("orphans", "expire-snapshots"):
        for args, message in cases:
            done = _run(env, command, "db.t", "--dry-run", "--json", *args)
            assert done.returncode == 2, (command, args, done.stderr)
            assert done.stdout == ""
            assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        # Both at once: argparse's refusal, as for the other exclusive options (its usage, then one error line).
        done = _run(env, command, "db.t", "--cache-location", "x", "--no-cache")
        assert done.returncode == 2 and "not allowed with argument" in done.stderr.strip().splitlines()[-1]
