"""Compaction: rewriting a table's data files and manifests into fewer, target-size ones (docs/cli.md)."""
