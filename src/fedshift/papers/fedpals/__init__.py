"""FedPALS (Listo Zec et al. 2024) as a paper plug-in of :mod:`fedshift.contract`.

``paper`` holds the plug-in class (:class:`~fedshift.papers.fedpals.paper.FedpalsPaper`, switched on in
``config/papers/fedpals.yaml``); ``config`` the experiments and their resolved runs; ``data`` the partitions and
each job's tensors; ``fit`` training and evaluation; ``synthetic`` the synthetic task (its stage in
``synthetic.smk``); ``report`` the tables and figures; ``schema.yaml`` the section's schema, ``report.rst`` the
report caption.

The public names of ``config``, ``data``, ``fit`` and ``synthetic`` are re-exported here, each imported on first use
(:func:`fedshift.plugins.lazy_exports`): importing the package, its ``config`` or its ``paper`` (the plan) imports
no torch. ``report`` is not re-exported.
"""

from fedshift.errors import ConfigError  # noqa: F401 (raised by check_section; tests catch it from here)
from fedshift.plugins import lazy_exports

__getattr__ = lazy_exports(__name__, ("config", "data", "fit", "synthetic"))
