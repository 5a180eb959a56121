"""A toy algorithm from a test folder, the proof that an algorithm is one registered factory (issue 17).

Uniform FedAvg: FedAvg's round (:func:`fedshift.algorithms.fedavg.build_fedavg`) with every sampled client's model
weighted equally (1/m) instead of by its size n_i, as in the "FedAvg-uniform" baselines of the label-shift
literature. ``algorithm_plugins: [tests/toy_algorithm/uniform_fedavg.py]`` loads it; any paper whose experiments
take registered algorithms by name (FedPALS, the toy paper) can then list ``uniform_fedavg``
(tests/workflow/test_contract_workflow.py).
"""

import numpy as np

from fedshift.algorithms.fedavg import build_fedavg
from fedshift.algorithms.registry import register


@register("uniform_fedavg")  # the one line that makes it an algorithm of every paper
def build_uniform_fedavg(module, **fedavg_kwargs):
    """FedAvg with equal aggregation weights; ``fedavg_kwargs`` as :func:`~fedshift.algorithms.fedavg.build_fedavg`."""
    return build_fedavg(module, client_weights=lambda ids, sizes: np.ones(len(ids)), name="uniform_fedavg",
                        **fedavg_kwargs)
