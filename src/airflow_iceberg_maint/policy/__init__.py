"""What to maintain and when, without Airflow.

Cleanup: ``policies`` (what to run on which tables), ``due`` (is a table due), ``job_config`` (the
exact options of one run). Indexes: ``index_definitions`` (the indexes each table keeps),
``lag_threshold`` (when a lag is worth acting on) and ``lag_plan`` (which indexes to refresh,
rebuild or expire). ``status_rows`` builds the status page's rows from these and the stored
records (``state``); ``values`` coerces loosely typed input. The Airflow layer
(``airflow_iceberg_maint.airflow``) wraps these in its hook, operators and page.
"""
