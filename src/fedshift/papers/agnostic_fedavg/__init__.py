"""AgnosticFedAvg (Ro et al. 2021, arXiv:2104.02748) and the AFL language-model Table 3 (Mohri et al. 2019).

``paper`` holds the plug-in class (:class:`~fedshift.papers.agnostic_fedavg.paper.AgnosticFedAvgPaper`, switched
on in ``config/papers/agnostic_fedavg.yaml``); ``config`` the section's checks, the experiments and datasets the
enabled outputs need and each run's resolved hyper-parameters; ``data`` the toy regression, the client spreads, each
experiment's partition and its loading; ``fit`` training and evaluation of one run; ``models`` the EMNIST CNN and the
toy regression; ``report`` the tables and figures; ``schema.yaml`` the section's schema, ``report.rst`` the report
caption.

The public names of ``config``, ``data``, ``fit`` and ``models`` are re-exported here, each imported on first use
(:func:`fedshift.plugins.lazy_exports`): importing the package, its ``config`` or its ``paper`` (the plan) imports
no torch. ``report`` is not re-exported.
"""

from fedshift.plugins import lazy_exports

__getattr__ = lazy_exports(__name__, ("config", "data", "fit", "models"))
