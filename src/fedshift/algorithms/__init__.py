"""Federated algorithms, one module per algorithm, each citing its paper."""
