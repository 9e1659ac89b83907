"""Orphan-file removal: list a table's files, match them against every referenced path, delete the rest.

``removal`` runs a job; ``referenced`` builds the set of paths the table, its other tables and
its reference sources (``sources``) need; ``manifests`` and ``manifest_pool`` read manifests;
``path_hashes`` turns paths into comparable hashes; ``other_tables`` protects nested tables.
"""
