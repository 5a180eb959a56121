"""The shift matrix's cost columns (:mod:`.tuning_table`): training CPU-seconds and bytes sent per round.

Per cell (algorithm, shift; :func:`cell_costs`) and per method (:func:`per_method`):

* the CPU-seconds of one run of the full budget R, from the tuning's measured CPU-seconds (``role: tuning`` rows)
  per round it trained (the ``rounds`` of every grid value's rows), times R;
* the bytes one round sends per client it samples, downlink plus uplink, from
  the parameter count of the network it trains (:func:`network_parameters`, the matrix's models counted without
  torch) and the arrays of that size its round sends each way, as its declaration states (:func:`payload`: the
  round engine has no message type to measure them at, and the matrix knows no algorithm by name).

Imports no torch (the report's jobs start without it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fedshift.algorithms.declarations import PAYLOAD_NETWORKS, Payload
from fedshift.papers.shift_matrix import rows

__all__ = ["BYTES_PER_VALUE", "NETWORKS", "Payload", "payload", "network_parameters", "cell_costs", "per_method"]

#: Bytes of one parameter on the wire: float32, as the matrix's models train.
BYTES_PER_VALUE = 4

#: [ours] the domain discriminator's hidden widths and the stochastic representation's z dimension in the matrix's
#: cells (``fedshift.algorithms.sgda.DOMAIN_HIDDEN``, ``fedshift.algorithms.fedsr``'s default ``z_dim``); a unit
#: test builds both networks with torch and checks :func:`network_parameters` against their ``numel``.
DOMAIN_HIDDEN = (100,)
REPRESENTATION_Z_DIM = 64

#: The networks a payload may name (:data:`fedshift.algorithms.declarations.PAYLOAD_NETWORKS`).
NETWORKS = PAYLOAD_NETWORKS


def payload(name: str) -> Payload | None:
    """The payload algorithm ``name`` declares (``payload`` on its declaration, :func:`.rows.declaration`), or None.

    An algorithm whose declaration gives none (no such field, or None), or a name not registered, has no bytes
    column: the matrix holds no algorithm's facts itself. A declared payload with ``down``, ``up`` and ``network``
    attributes or keys is read as :class:`Payload`.

    Raises
    ------
    ValueError
        For a declared network outside :data:`NETWORKS`, naming the algorithm.
    """
    try:
        got = getattr(rows.declaration(name), "payload", None)
    except KeyError:  # not a registered algorithm (a report's rows may name one no longer registered)
        return None
    if got is None:
        return None
    read = dict(got) if isinstance(got, Mapping) else {k: getattr(got, k) for k in ("down", "up", "network")}
    if read.get("network", "model") not in NETWORKS:
        raise ValueError(f"algorithm {name!r} declares a payload on network {read['network']!r}; known: {NETWORKS}")
    return Payload(**read)


#: The (network, model) pairs :func:`network_parameters` counts (the DANN network needs the CNN's features).
_NETWORKS = {("model", "logreg"), ("model", "cnn2"), ("representation", "logreg"), ("representation", "cnn2"),
             ("discriminator", "cnn2")}


def network_parameters(network: str, model: str, image_side: int, num_labels: int) -> int:
    """Parameters of the network an algorithm trains in a cell of ``model`` on grey ``image_side``² inputs.

    ``logreg``: side²·K + K; ``cnn2`` (:class:`fedshift.models.TwoLayerCNN`): Conv(1→16, 5×5), Conv(16→32, 5×5)
    and Linear(32·s² → K), s = ((side − 4)//2 − 4)//2. ``discriminator`` adds a domain discriminator on the
    model's features, an MLP F → :data:`DOMAIN_HIDDEN` → 1 (``fedshift.algorithms.sgda.dann_network``; F = 32·s², the
    CNN's only); ``representation`` replaces the model's head Linear(F → K) by the encoder F → 2z, the classifier
    z → K and r_μ, r_σ of K × z (``fedshift.algorithms.fedsr.FedSRNet``, z = :data:`REPRESENTATION_Z_DIM`; F = side²
    for ``logreg``).

    Raises
    ------
    ValueError
        For another model or network, or ``discriminator`` on ``logreg`` (no feature extractor).
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
    if network == "discriminator":
        sizes = [width, *DOMAIN_HIDDEN, 1]
        return features + head + sum(a * b + b for a, b in zip(sizes, sizes[1:], strict=False))
    z = REPRESENTATION_Z_DIM  # representation
    return features + (width * 2 * z + 2 * z) + (z * k + k) + 2 * k * z


def cell_costs(metrics: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Per (algorithm, shift) cell: one training run's CPU-seconds over its seeds and the bytes a round sends.

    ``training_cpu_seconds``: per seed the tuning's CPU-seconds (its ``role: tuning, metric: cpu_seconds`` row)
    over the rounds it trained (Σ over the grid values of their ``rounds``: successive halving trains 9 values to
    R/9, 3 to R/3 and one to R) times R, the survivor's rounds, summed over the seeds; the tuning's validation
    scoring after each rung is counted in (it is part of the measured seconds). ``bytes_per_round``: per sampled
    client, down + up, ``(down + up) · P · BYTES_PER_VALUE`` with the algorithm's declared :func:`payload` and P =
    :func:`network_parameters` of the payload's network for ``params["model"]`` on the shift's image side
    (``params["image_side"]``) and K (1 / ``params["chance"]``).

    Returns
    -------
    DataFrame
        ``algorithm, shift, training_cpu_seconds, bytes_per_round`` for every algorithm of ``params["algorithms"]``
        and shift of ``params["columns"]`` where the cell is not n/a (``params["na"]``); NaN where the rows give no
        tuning cost or rounds, and where the algorithm declares no payload, or the image side or the model's network
        is not known.
    """
    sides, chance, model = params.get("image_side") or {}, params.get("chance") or {}, params.get("model")
    shifts = list(dict.fromkeys(c["shift"] for c in params.get("columns", [])))
    seconds = _training_seconds(metrics)
    rows = []
    for alg in params["algorithms"]:
        pay, na = payload(alg), (params.get("na") or {}).get(alg, {})
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
