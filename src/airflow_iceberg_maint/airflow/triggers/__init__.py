"""Triggers of the provider; they live in the installed package because the triggerer does not load DAG bundles."""
