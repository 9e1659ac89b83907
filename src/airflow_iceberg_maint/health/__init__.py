"""Table health: statistics from metadata and manifests, a score with named deductions, the fleet scan, and
the trigger expressions of policies (docs/health.md)."""
