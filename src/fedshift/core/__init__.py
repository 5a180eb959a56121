"""The ground floor: what every algorithm, paper and shift builds on, and which imports nothing above it.

* :mod:`.base` — ``Params``, ``ClientData``, ``FederatedAlgorithm`` (FedJAX-style init/apply objects).
* :mod:`.engine` — local training of many clients at once (batched, sequential, streamed paths).
* :mod:`.training` — the round loop, checkpoints and exact resume.
* :mod:`.rng` — ``RoundKey``: one RNG stream per (seed, round, client).
* :mod:`.optim`, :mod:`.simplex`, :mod:`.aggregate` — optimisers, simplex projections, weighted averages.
* :mod:`.selection` — model-selection wrappers (snapshots, early stopping on validation).
* :mod:`.metrics` — evaluation of client populations with a fraction of the clients shifted.

The layer contract (``.importlinter``, checked by ``tests/unit/test_layers.py``) keeps it so: nothing here
imports :mod:`fedshift.models`, :mod:`fedshift.algorithms`, :mod:`fedshift.papers` or :mod:`fedshift.shifts`.
"""
