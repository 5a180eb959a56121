"""FedPALS (Listo Zec et al. 2024) as a paper plug-in of :mod:`fedshift.contract`.

``paper`` holds the plug-in class (:class:`~fedshift.papers.fedpals.paper.FedpalsPaper`, switched on in
``config/papers/fedpals.yaml``), ``core`` the experiments (configuration, partitions, training, evaluation,
the synthetic task; re-exported here), ``report`` the tables and figures, ``schema.yaml`` the section's schema,
``report.rst`` the report caption and ``synthetic.smk`` the synthetic task's stage (no engine run).
The report module is not imported here: a training job's code hash must not cover plotting code.
"""

from fedshift.config import ConfigError  # noqa: F401 (raised by validate; tests catch it from here)
from fedshift.papers.fedpals.core import *  # noqa: F403
from fedshift.papers.fedpals.core import __all__ as _core_all
from fedshift.papers.fedpals.core import _build, _images  # noqa: F401 (tests use them)

__all__ = list(_core_all)
