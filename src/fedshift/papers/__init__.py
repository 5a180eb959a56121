"""Per-paper job functions (what the workflow's thin scripts call) for papers with their own config section."""
