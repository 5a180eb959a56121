"""FedPALS (Listo Zec et al. 2024) as a paper plug-in of :mod:`fedshift.contract`.

``paper`` holds the plug-in class (:class:`~fedshift.papers.fedpals.paper.FedpalsPaper`, switched on in
``config/papers/fedpals.yaml``); ``config`` the experiments and their resolved runs; ``data`` the partitions and
each job's tensors; ``fit`` training and evaluation; ``synthetic`` the synthetic task (its stage in
``synthetic.smk``); ``report`` the tables and figures; ``schema.yaml`` the section's schema, ``report.rst`` the
report caption. The public names of the four computation modules are re-exported here. The report module is not
imported here: a training job's code hash must not cover plotting code.
"""

from fedshift.config import ConfigError  # noqa: F401 (raised by check_section; tests catch it from here)
from fedshift.papers.fedpals.config import *  # noqa: F403
from fedshift.papers.fedpals.config import __all__ as _config_all
from fedshift.papers.fedpals.data import *  # noqa: F403
from fedshift.papers.fedpals.data import __all__ as _data_all
from fedshift.papers.fedpals.fit import *  # noqa: F403
from fedshift.papers.fedpals.fit import __all__ as _fit_all
from fedshift.papers.fedpals.synthetic import *  # noqa: F403
from fedshift.papers.fedpals.synthetic import __all__ as _synthetic_all

__all__ = [*_config_all, *_data_all, *_fit_all, *_synthetic_all]
