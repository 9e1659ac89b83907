"""A reviewed run applies an approval only to the very table that was reviewed (S16).

A table's name can be dropped and created again: the new table is another one (a new UUID), with
its own snapshots, refs and files that no reviewer saw. So an approved run checks the reviewed
report's ``table_uuid`` against the table it loaded, not only its name, and refuses otherwise.
"""

from __future__ import annotations

from airflow_iceberg_maint.errors import InvalidInputError


def refuse_another_table(report: str, table: str, reviewed_uuid: object, table_uuid: object) -> None:
    """Refuse (``InvalidInputError``, nothing changed) when the reviewed table's UUID is not the table's."""
    if reviewed_uuid is None or str(reviewed_uuid) != str(table_uuid):
        raise InvalidInputError(
            f"approved_report {report}: reviewed table {table} with UUID {reviewed_uuid}, but table {table} now "
            f"has UUID {table_uuid} (dropped and created again): the approval is not for this table; nothing "
            "was changed"
        )
