"""Keep Apache Iceberg tables healthy from Airflow: orphan-file removal and secondary indexes.

The core library (everything outside ``airflow_iceberg_maint.airflow``) never imports Airflow.
Comments cite the safety rules S1 to S17 of ``docs/safety.md``, which names the tests proving each.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    # pyproject.toml's version, as installed: the one place it is written (provider_info reads this too).
    __version__ = version("airflow-iceberg-maint")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
