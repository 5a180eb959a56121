"""Datasets: registry-driven download with checksums, decoding, preparation."""
