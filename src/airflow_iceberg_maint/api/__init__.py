"""The public Python API's own functions and types; ``airflow_iceberg_maint`` exports them with the reports and
errors they return and raise (docs/python.md): import them from there.

``tables``: catalogs and tables, and the argument checks; ``cleanup``: orphan-file removal and snapshot
expiry; ``indexes``: the index operations. Each function calls the same engine as the command line.
"""
