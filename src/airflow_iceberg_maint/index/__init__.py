"""Secondary indexes on Iceberg tables, following the draft Iceberg index spec.

Layout: ``expressions`` (index expressions), ``metadata`` (the index metadata file),
``store`` (discovery under ``<table>/index/<name>/`` and atomic commits), ``expire`` (dropping
old extracts), ``references`` (the files an index keeps alive, for orphan removal), and the
build, lookup and lag modules. The file format decisions are in ``docs/index-format.md``.
"""
