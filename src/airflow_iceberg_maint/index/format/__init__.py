"""The data files of an extract: region and tracking files (``extract_files``); the index order of
their keys is ``airflow_iceberg_maint.sorting.ordering``."""
