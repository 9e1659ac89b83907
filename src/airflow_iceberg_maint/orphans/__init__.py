"""Orphan-file removal: list a table's files, match them against every referenced path, delete the rest.

``removal`` runs a job in one task: ``setup`` checks it (``options``, ``cutoff``), ``listing``
lists the location (or ``inventory``, with ``s3_inventory``, reads it from an inventory),
``referenced`` builds the set of paths the table, its other tables and its reference sources
(``sources``) need, ``matching`` subtracts it, and ``settling`` re-checks and
deletes, filling the ``report``. ``manifests`` (with ``avro_plans``) and ``manifest_pool`` read
manifests; ``path_hashes`` turns paths into comparable hashes; ``other_tables`` protects nested
tables. ``sharded`` spreads one table's scan over tasks (``shard_plan``, ``shard_match``,
``shard_finish``, ``shard_files``), ending in the same ``settling``.
"""
