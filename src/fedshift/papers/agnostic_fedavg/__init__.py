"""AgnosticFedAvg (Ro et al. 2021, arXiv:2104.02748) and the AFL language-model Table 3 (Mohri et al. 2019).

``paper`` holds the plug-in class (:class:`~fedshift.papers.agnostic_fedavg.paper.AgnosticFedAvgPaper`, switched
on in ``config/papers/agnostic_fedavg.yaml``); ``config`` the section's checks, the experiments and datasets the
enabled outputs need and each run's resolved hyper-parameters; ``data`` the toy regression, the client spreads, each
experiment's partition and its loading; ``fit`` training and evaluation of one run; ``models`` the EMNIST CNN and the
toy regression; ``report`` the tables and figures; ``schema.yaml`` the section's schema, ``report.rst`` the report
caption. The public names of the four computation modules are re-exported here. The report module is not imported
here: a training job's code hash must not cover plotting code.
"""

from fedshift.papers.agnostic_fedavg.config import *  # noqa: F403
from fedshift.papers.agnostic_fedavg.config import __all__ as _config_all
from fedshift.papers.agnostic_fedavg.data import *  # noqa: F403
from fedshift.papers.agnostic_fedavg.data import __all__ as _data_all
from fedshift.papers.agnostic_fedavg.fit import *  # noqa: F403
from fedshift.papers.agnostic_fedavg.fit import __all__ as _fit_all
from fedshift.papers.agnostic_fedavg.models import *  # noqa: F403
from fedshift.papers.agnostic_fedavg.models import __all__ as _models_all

__all__ = [*_config_all, *_data_all, *_fit_all, *_models_all]
