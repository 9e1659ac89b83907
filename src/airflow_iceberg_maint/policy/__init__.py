"""When to clean a table: policies, whether a table is due, job configurations, and cleanup state."""
