"""Per-paper experiment code: configuration checks, partitions and the jobs the workflow runs."""
