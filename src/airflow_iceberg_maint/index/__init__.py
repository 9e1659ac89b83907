"""Secondary indexes on Iceberg tables, following the draft Iceberg index spec.

Packages by job, each importing only those listed before it:

- ``metadata``: the index metadata file (spec numbers, model, rules, builders), the index
  expressions it holds, and the store (discovery under ``<table>/index/<name>/``, atomic commits);
- ``format``: region and tracking files, and the index order their keys follow;
- ``source``: the indexed table's files: a snapshot's data and delete files, live rows with their
  positions, Parquet files read page by page;
- ``lifecycle``: an index's lag behind its table, the files it keeps alive (for orphan removal),
  expiring old extracts;
- ``write``: building extracts (full, sharded, incremental) and committing them;
- ``read``: lookups and queries through an index.

The file format decisions are in ``docs/index-format.md``.
"""
