"""Orphan-file removal: list a table's files, match them against every referenced path, delete the rest.

``removal`` runs a job in one task: ``options`` checks it and sets the scan up (with the cutoff of
``reachability.cutoff``), ``listing`` lists the location (or reads an inventory), the
``reachability`` package builds the set of paths the table, its other tables and its reference
sources need, ``matching`` (with ``exact_match``) subtracts it, and ``settling`` re-checks
(``tables_now``) and deletes, filling the ``report``. ``sharded`` spreads one table's scan over
tasks, ending in the same ``settling``.
"""
