"""The Airflow layer: operators, sensors and triggers, each a thin shell over the core library.

Catalogs come from the ``iceberg`` connection type of apache-airflow-providers-apache-iceberg
(its ``IcebergHook`` accepts any pyiceberg catalog through the connection extra ``type``).
"""
