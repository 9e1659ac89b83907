"""What the maintenance runs keep outside the tables: cleanup records, status records, and table leases.

- ``cleanup``: per table and job, when the job last succeeded and what its last attempt did
  (``StateStore``; ``SqlStateStore``), keyed by the job names of ``jobs``;
- ``status_records``: run history, index lags and the policies' tables, for the status page;
- ``leases``: one maintenance run on a table at a time (``LeaseStore``), held in SQL by ``sql_leases``,
  fenced before every delete batch and commit by ``lease_fence`` (S15); ``lease_holder`` tells whether
  a holder's process still runs.

The stores backed by Airflow (``airflow/variable_store.py``, the Variable stores of the records and
the state; ``airflow/table_lease.py``, the lease of an Airflow task) stay in the ``airflow`` package,
because the core never imports Airflow. This package imports only ``errors`` and ``fencing``
(tests/test_layers.py).
"""
