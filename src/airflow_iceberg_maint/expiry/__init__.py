"""Snapshot expiry: the Iceberg table spec's retention, committed through pyiceberg, then the files
only expired snapshots reached deleted without listing storage (``docs/expiry.md``).

One concept a module: ``settings`` (cutoff and retain-last from options and table properties),
``retention`` (which snapshots and refs go), ``pins`` (snapshots other parts of the project need),
``commit`` (the metadata change), ``files`` (what to delete), ``run`` (the whole run and its report).
"""
