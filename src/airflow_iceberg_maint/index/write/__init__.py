"""Writing extracts: entries and region files (``build``, sorting with ``airflow_iceberg_maint.sorting``),
a full refresh (``refresh``), a sharded build over key ranges (``sharded_build``, ``key_ranges``), and
the incremental refresh (``incremental``, ``region_rewrite``)."""
