"""Keep Apache Iceberg tables healthy from Airflow: orphan-file removal and secondary indexes.

The core library (everything outside ``airflow_iceberg_maint.airflow``) never imports Airflow.
"""

__version__ = "0.1.0"
