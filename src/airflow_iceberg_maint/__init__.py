"""Keep Apache Iceberg tables healthy from Airflow: orphan-file removal and secondary indexes.

The core library (everything outside ``airflow_iceberg_maint.airflow``) never imports Airflow.
Comments cite the safety rules S1 to S17 of ``docs/safety.md``, which names the tests proving each.
"""

__version__ = "0.1.0"
