"""What a table references: every file its metadata reaches, held compactly, and what protects the rest.

Used by orphan removal, snapshot expiry, the index and policies; it imports none of them (only
``fs``, ``errors``, ``pyiceberg_compat``, ``sorting`` and ``progress``: tests/test_layers.py).

``reference_walk`` reads a table's manifest lists and manifests (``manifests``, whose Avro plans are
``avro_plans``; many at once in ``manifest_pool``'s worker processes; across runs through the
``digests`` cache, S22) into a ``referenced`` set of
path hashes (``path_hashes``; past its memory share as sorted runs, ``referenced_runs``), together
with the files of the reference sources (``sources``, S1). ``other_tables`` finds the other tables
whose files lie under a location (S8); ``cutoff`` holds the age rules every cleanup applies (S7).
"""
