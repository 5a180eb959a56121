"""Per-paper experiment code for the papers with their own config section.

Configuration checks, partitions, and the job functions the workflow's thin scripts call.
"""
