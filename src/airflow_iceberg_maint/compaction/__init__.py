"""Compaction: data files rewritten into files of the target size, with every delete applied, and manifests
regrouped by partition (docs/cli.md).

``options``: the options, their defaults and table properties; ``live_files``: the live entries of a snapshot;
``planning``: candidate files and file groups; ``ordering``: the sort and z-order strategies; ``writer``: Parquet
files rolled at the target size on storage; ``rewriter``: a group's live rows into new files; ``snapshot``: a
``replace`` snapshot; ``commit``: its validation and commit; ``dangling``: delete files that apply to nothing;
``report``: the JSON report; ``run``: the whole rewrite; ``manifests``: rewrite-manifests.
"""
