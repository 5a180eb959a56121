"""The shift matrix's cost columns (:mod:`.tuning_table`): training CPU-seconds and bytes sent per round.

Per cell (algorithm, shift; :func:`cell_costs`) and per method (:func:`per_method`):

* the CPU-seconds of one run of the full budget R, from the tuning's measured CPU-seconds (``role: tuning`` rows)
  per round it trained (the ``rounds`` of every grid value's rows), times R;
* the bytes one round sends per client it samples, downlink plus uplink, from
  the parameter count of the network it trains (:func:`network_parameters`, the matrix's models counted without
  torch) and the arrays of that size its round sends each way (:data:`PAYLOADS`, declared here from each
  algorithm's module docstring: the round engine has no message type to measure them at).

Imports no torch (the report's jobs start without it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BYTES_PER_VALUE", "Payload", "PAYLOADS", "network_parameters", "cell_costs", "per_method"]

#: Bytes of one parameter on the wire: float32, as the matrix's models train.
BYTES_PER_VALUE = 4

#: [ours] the domain discriminator's hidden widths and FedSR's z dimension in the matrix's cells
#: (``fedshift.algorithms.sgda.DOMAIN_HIDDEN``, ``fedshift.algorithms.fedsr``'s default ``z_dim``); a unit test
#: builds both networks with torch and checks :func:`network_parameters` against their ``numel``.
DOMAIN_HIDDEN = (100,)
FEDSR_Z_DIM = 64


@dataclass(frozen=True)
class Payload:
    """What one round sends per sampled client, in arrays of the size of the network the algorithm trains.

    Attributes
    ----------
    down, up : float
        Arrays server → client and client → server per sampled client (a round that samples two groups of m
        clients, as DRFA's, counts all its arrays over m).
    network : str
        ``"model"`` (the cell's model), ``"dann"`` (the model plus a domain discriminator on its features) or
        ``"fedsr"`` (the model's features, FedSR's encoder and classifier, and its reference distribution).
    source : str
        Where the algorithm states what it sends.
    """

    down: float
    up: float
    network: str = "model"
    source: str = ""


_FEDAVG = Payload(1, 1, source="the server model down, the client model (or its update) up")
#: Per registered algorithm of the matrix, what a round sends. Scalars (a client's n_i, τ_i, loss or h_i, a λ of p
#: domains: a few bytes) are left out. An algorithm not listed (a plug-in; Stochastic-AFL, whose round is S steps
#: of Fig. 3 on one client per domain, S from the clients' sizes) has no bytes column.
PAYLOADS: dict[str, Payload] = {
    **dict.fromkeys(["fedavg", "fedprox", "fedlc", "fedpals", "wafl", "fedpgm", "fedfgsm", "robust_fedavg",
                     "domain_fedavg", "fednova", "fedadam", "fedyogi", "fedadagrad"], _FEDAVG),
    "agnostic_fedavg": Payload(1, 1, source="w and α (p scalars) down; β^k Δ^k, β^k, L^k and N^k (scalars) up "
                                            "(Ro et al. 2021)"),
    "fedbn": Payload(1, 1, source="every parameter but batch norm's; the matrix's models have none"),
    "feddyn": Payload(1, 1, source="θ down, θ_k up; ∇L_k(θ_k) stays on the client"),
    "qffl": Payload(1, 1, source="w down, Δ_k up (h_k a scalar)"),
    "scaffold": Payload(2, 2, source="x and c down, Δy_i and Δc_i up (Karimireddy et al. 2020, Alg. 1)"),
    "drfa": Payload(2, 2, source="w down to D, the last iterate and the snapshot w^(t') up; w^(t') down to U, a "
                                 "loss up (Deng et al. 2020, Alg. 1)"),
    "fedmm": Payload(1, 1, "dann", source="(ω₀, ψ₀) down, the consensus message (15) up; the duals stay local"),
    **dict.fromkeys(["fedavg_sgda", "fedprox_sgda", "fedsgda"],
                    Payload(1, 1, "dann", source="(ω₀, ψ₀) down, (ω_i, ψ_i) up")),
    "fedsr": Payload(1, 1, "fedsr", source="every parameter, r_μ and r_σ included, both ways"),
}


#: The (network, model) pairs :func:`network_parameters` counts (the DANN network needs the CNN's features).
_NETWORKS = {("model", "logreg"), ("model", "cnn2"), ("fedsr", "logreg"), ("fedsr", "cnn2"), ("dann", "cnn2")}


def network_parameters(network: str, model: str, image_side: int, num_labels: int) -> int:
    """Parameters of the network an algorithm trains in a cell of ``model`` on grey ``image_side``² inputs.

    ``logreg``: side²·K + K; ``cnn2`` (:class:`fedshift.models.TwoLayerCNN`): Conv(1→16, 5×5), Conv(16→32, 5×5)
    and Linear(32·s² → K), s = ((side − 4)//2 − 4)//2. ``dann`` adds the discriminator on the model's features,
    an MLP F → :data:`DOMAIN_HIDDEN` → 1 (``fedshift.algorithms.sgda.dann_network``; F = 32·s², the CNN's only);
    ``fedsr`` replaces the model's head Linear(F → K) by the encoder F → 2z, the classifier z → K and r_μ, r_σ of
    K × z (``fedshift.algorithms.fedsr.FedSRNet``, z = :data:`FEDSR_Z_DIM`; F = side² for ``logreg``).

    Raises
    ------
    ValueError
        For another model or network, or ``dann`` on ``logreg`` (no feature extractor).
    """
    k = num_labels
    if model == "logreg":
        features, width = 0, image_side * image_side
    elif model == "cnn2":
        s = ((image_side - 4) // 2 - 4) // 2
        features, width = (16 * 25 + 16) + (16 * 32 * 25 + 32), 32 * s * s
    else:
        raise ValueError(f"network_parameters: unknown model {model!r}; known: cnn2, logreg")
    head = width * k + k
    if network == "model":
        return features + head
    if (network, model) not in _NETWORKS:
        raise ValueError(f"network_parameters: no {network!r} network on model {model!r}")
    if network == "dann":
        sizes = [width, *DOMAIN_HIDDEN, 1]
        return features + head + sum(a * b + b for a, b in zip(sizes, sizes[1:], strict=False))
    z = FEDSR_Z_DIM  # fedsr
    return features + (width * 2 * z + 2 * z) + (z * k + k) + 2 * k * z


def cell_costs(metrics: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Per (algorithm, shift) cell: one training run's CPU-seconds over its seeds and the bytes a round sends.

    ``training_cpu_seconds``: per seed the tuning's CPU-seconds (its ``role: tuning, metric: cpu_seconds`` row)
    over the rounds it trained (Σ over the grid values of their ``rounds``: successive halving trains 9 values to
    R/9, 3 to R/3 and one to R) times R, the survivor's rounds, summed over the seeds; the tuning's validation
    scoring after each rung is counted in (it is part of the measured seconds). ``bytes_per_round``: per sampled
    client, down + up, ``(down + up) · P · BYTES_PER_VALUE`` with :data:`PAYLOADS` and P =
    :func:`network_parameters` of the payload's network for ``params["model"]`` on the shift's image side
    (``params["image_side"]``) and K (1 / ``params["chance"]``).

    Returns
    -------
    DataFrame
        ``algorithm, shift, training_cpu_seconds, bytes_per_round`` for every algorithm of ``params["algorithms"]``
        and shift of ``params["columns"]`` where the cell is not n/a (``params["na"]``); NaN where the rows give no
        tuning cost or rounds, and where the payload (a plug-in, Stochastic-AFL), the image side or the model's
        network is not known.
    """
    sides, chance, model = params.get("image_side") or {}, params.get("chance") or {}, params.get("model")
    shifts = list(dict.fromkeys(c["shift"] for c in params.get("columns", [])))
    seconds = _training_seconds(metrics)
    rows = []
    for alg in params["algorithms"]:
        pay, na = PAYLOADS.get(alg), (params.get("na") or {}).get(alg, {})
        for sh in shifts:
            if na.get(sh):
                continue
            sent = np.nan
            if pay is not None and sh in sides and sh in chance and (pay.network, model) in _NETWORKS:
                size = network_parameters(pay.network, model, int(sides[sh]), round(1 / chance[sh]))
                sent = float(size * (pay.down + pay.up) * BYTES_PER_VALUE)
            rows.append({"algorithm": alg, "shift": sh, "training_cpu_seconds": seconds.get((alg, sh), np.nan),
                         "bytes_per_round": sent})
    return pd.DataFrame(rows, columns=["algorithm", "shift", "training_cpu_seconds", "bytes_per_round"])


def _training_seconds(metrics: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(algorithm, shift) → the CPU-seconds of one full-budget run per seed, summed (:func:`cell_costs`)."""
    need = {"role", "rounds", "grid", "shift", "seed", "algorithm", "value"}
    if not need <= set(metrics.columns) or metrics.empty:
        return {}
    cost = metrics[metrics["role"] == "tuning"].groupby(["algorithm", "shift", "seed"])["value"].sum()
    runs = metrics[metrics["role"].isin(["validation", "test"]) & (metrics["grid"] >= 0)]
    trained = runs.groupby(["algorithm", "shift", "seed", "grid"])["rounds"].max().astype(float)
    total = trained.groupby(level=["algorithm", "shift", "seed"]).agg(["sum", "max"])
    both = total.join(cost.rename("cpu"), how="inner")
    both = both[(both["sum"] > 0) & both["cpu"].notna()]
    per = (both["cpu"] / both["sum"] * both["max"]).groupby(level=["algorithm", "shift"]).sum()
    return {k: float(v) for k, v in per.items()}


def per_method(cells: pd.DataFrame, algorithms: list[str]) -> pd.DataFrame:
    """Per algorithm: its cells' training CPU-seconds summed, and the largest bytes per round over its shifts.

    Returns
    -------
    DataFrame
        ``training_cpu_seconds, bytes_per_round`` indexed by ``algorithms`` (NaN where no cell gives one).
    """
    g = cells.groupby("algorithm")
    out = pd.DataFrame({"training_cpu_seconds": g["training_cpu_seconds"].sum(min_count=1),
                        "bytes_per_round": g["bytes_per_round"].max()})
    return out.reindex(algorithms)
