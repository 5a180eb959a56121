"""AFL (Mohri, Sivek, Suresh: Agnostic Federated Learning, ICML 2019): Tables 1 (Adult) and 2 (Fashion-MNIST).

``paper`` holds the plug-in class (:class:`~fedshift.papers.afl.paper.AflPaper`, switched on in
``config/papers/afl.yaml``); ``config`` the section's checks, the tables, experiments and datasets to build, the run
ids and each run's resolved hyper-parameters; ``data`` the domain partitions and each run's clients and test sets;
``fit`` training (one run or several seeds batched) and evaluation; ``report`` the tables and figures;
``schema.yaml`` the section's schema, ``report.rst`` the report caption. The algorithm itself, Stochastic-AFL
(Fig. 3), is the registered algorithm ``afl`` (:mod:`fedshift.algorithms.afl`).

The public names of ``config``, ``data`` and ``fit`` are re-exported here, each imported on first use
(:func:`fedshift.plugins.lazy_exports`): importing the package, its ``config`` or its ``paper`` (the plan) imports
no torch. ``report`` is not re-exported.
"""

from fedshift.plugins import lazy_exports

__getattr__ = lazy_exports(__name__, ("config", "data", "fit"))
