"""Maintenance planning and bookkeeping that needs no Airflow: index definitions, lag thresholds and the
lag plan, and the status records (cleanup states, run history, index lags) the status page reads.

The Airflow layer (``airflow_iceberg_maint.airflow``) wraps these in its hook, operators and page.
"""
