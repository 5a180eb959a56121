"""Local training of a round's sampled clients: all at once (batched) or one by one (sequential).

The pools and the batch plan live here; the three loops that consume the plan are in :mod:`fedshift.core.local_loops`.

The batched path stacks the clients' parameters along a leading client axis and runs every local
step of every client as one call of ``torch.func.vmap(torch.func.grad_and_value(loss))`` on a
``(C, B, ...)`` batch tensor; the sequential path is the plain per-client loop with
``torch.autograd.grad`` and is kept as the reference. Both paths read the same batches: client c's
batch order in epoch e comes from ``key.numpy(client_id, e)`` (see :mod:`fedshift.core.rng`), so they
agree to floating-point rounding (tested to 1e-10 in float64).

Data path: client data live once, contiguously, on the run's device in a :class:`ClientPool`
(one tensor of all examples plus offsets); a round gathers its batches by index, never through a
per-sample ``Dataset.__getitem__``. Per-client losses stay on the device.

Per-client state and algorithm-specific local objectives are expressed through two hooks, applied
identically on both paths:

* ``regularizer(params, context) -> scalar`` added to the mini-batch loss (FedProx's
  μ/2‖w − w_g‖², FedMM's augmented-Lagrangian terms, ...);
* ``grad_transform(grads, context) -> grads`` applied before the step (SCAFFOLD's g − c_i + c);
* ``perturb(params, x, y) -> x'`` replaces each mini-batch's inputs before the loss (adversarial
  training: WAFL's Wasserstein inner maximisation, PGD, FGSM; :mod:`fedshift.algorithms.adversarial`).
  The mean squared perturbation ‖x' − x‖² of each client's examples is returned as ``extras["rho2"]``.

For logistic regression, the batched path computes the cross-entropy gradient with two batched
matrix products (:func:`fedshift.models.logreg_grads`) instead of ``vmap``: the model is launch-bound and this cuts
the per-step overhead several-fold; the regulariser's gradient is still taken by ``vmap(grad)``.

``context`` holds ``shared`` tensors (the same for every client, e.g. the global model) and
``per_client`` tensors with a leading client axis (control variates, dual variables), sliced per
client on the sequential path. Clients with fewer examples take fewer steps: missing steps are
masked out on the batched path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedshift.core.base import ClientData, Params
from fedshift.core.local_loops import (
    GradTransform,
    LocalResult,
    OnClient,
    Perturb,
    Regularizer,
    batched_sgd,
    closed_form_grads,
    gather_rows,
    sequential_sgd,
    streamed_sgd,
    tree_leaves,
)
from fedshift.core.rng import RoundKey

__all__ = ["ClientPool", "FilePool", "pool_cache", "RoundBatches", "make_batches", "local_sgd",
           "choose_path", "PATHS"]

PATHS = ("auto", "batched", "sequential")


def choose_path(module: nn.Module, device: torch.device) -> str:
    """The faster path for a model and device (what ``path="auto"`` runs).

    Batched for logistic regression (launch-bound: one bmm-based step for all clients replaces
    C·S small ones) and for every model on CUDA; sequential for other models on the CPU, where
    convolutions are compute-bound and ``vmap``'s grouped convolutions run slower than per-client
    ones (``benchmarks/simulation_fedavg.py``: McMahan CNN 1.28× vs 1.08× the kernel floor).
    """
    if closed_form_grads(module) is not None or device.type == "cuda":
        return "batched"
    return "sequential"


@dataclass(frozen=True)
class ClientPool:
    """All clients' examples in one contiguous tensor on the run's device.

    Attributes
    ----------
    x : Tensor, shape (N, ...)
        Inputs of every client, client after client.
    y : Tensor, shape (N,)
        Labels (int64).
    offsets : ndarray of int64, shape (M + 1,)
        Client i holds rows ``offsets[i]:offsets[i + 1]``.
    """

    x: torch.Tensor
    y: torch.Tensor
    offsets: np.ndarray

    @classmethod
    def from_clients(cls, clients: Sequence[ClientData]) -> ClientPool:
        """Concatenate the clients' tensors.

        Raises
        ------
        ValueError
            If the client ids are not 0..M−1 in order.
        """
        if [c.client_id for c in clients] != list(range(len(clients))):
            raise ValueError("ClientPool needs clients with ids 0..M-1 in order")
        offsets = np.concatenate([[0], np.cumsum([c.num_examples for c in clients])]).astype(np.int64)
        return cls(torch.cat([c.x for c in clients]).contiguous(), torch.cat([c.y for c in clients]), offsets)

    @property
    def num_clients(self) -> int:
        """M."""
        return len(self.offsets) - 1

    def sizes(self) -> np.ndarray:
        """n_i of every client, shape (M,)."""
        return np.diff(self.offsets)

    def client(self, i: int) -> ClientData:
        """Client i as a view (no copy)."""
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return ClientData(i, self.x[lo:hi], self.y[lo:hi], 0)


@dataclass(frozen=True)
class FilePool:
    """Clients whose examples are decoded from files batch by batch (images that do not fit in memory).

    Local training on a FilePool runs client after client with a ``torch.utils.data.DataLoader``
    (:func:`local_sgd` dispatches to it): the streamed path of the PACS and iWildCam experiments
    (ResNet-50 on 224- and 448-pixel images, Bai et al. 2024).

    Attributes
    ----------
    dataset : torch.utils.data.Dataset
        Item ``(row, seed) -> (x, y)``: row ``row`` decoded with its random augmentation seeded by
        ``seed`` (:class:`fedshift.data.wilds.ImageFiles`), so batches do not depend on the worker count.
    offsets : ndarray of int64, shape (M + 1,)
        Client i holds rows ``offsets[i]:offsets[i + 1]`` of ``dataset``.
    device : torch.device
        Where batches are moved for the forward/backward pass.
    client_optimizer : {"sgd", "adam"}
        Local optimiser, created fresh at each client's round with step size ``lr`` (Bai et al. train
        clients with Adam; tensor pools always run plain SGD).
    num_workers : int
        DataLoader worker processes (0: decode in the training process).
    """

    dataset: Any
    offsets: np.ndarray
    device: torch.device
    client_optimizer: str = "sgd"
    num_workers: int = 0

    def __post_init__(self) -> None:
        if self.client_optimizer not in ("sgd", "adam"):
            raise ValueError(f"client_optimizer must be 'sgd' or 'adam', got {self.client_optimizer!r}")
        sizes = np.diff(self.offsets)
        if len(sizes) == 0 or (sizes <= 0).any():
            raise ValueError(f"every client needs at least one example; sizes {sizes.tolist()}")

    @property
    def num_clients(self) -> int:
        """M."""
        return len(self.offsets) - 1

    def sizes(self) -> np.ndarray:
        """n_i of every client, shape (M,)."""
        return np.diff(self.offsets)


def pool_cache() -> Callable[[Sequence[ClientData] | ClientPool], ClientPool]:
    """A memo for one algorithm: the :class:`ClientPool` of a client list, gathered once per list.

    Returns
    -------
    callable
        ``pool_of(clients)``: a ClientPool or FilePool is returned as is; a list of ClientData is concatenated
        the first time that list object is seen (the memo holds the list, so its id cannot be reused)
        and the same pool is returned until another list comes.
    """
    cache: dict[str, Any] = {}

    def pool_of(clients: Sequence[ClientData] | ClientPool | FilePool) -> ClientPool | FilePool:
        if isinstance(clients, ClientPool | FilePool):
            return clients
        if cache.get("clients") is not clients:
            cache.update(clients=clients, pool=ClientPool.from_clients(clients))
        return cache["pool"]

    return pool_of


@dataclass(frozen=True)
class RoundBatches:
    """The local mini-batches of a round's sampled clients.

    Attributes
    ----------
    index : Tensor, shape (C, S, B), int64
        Row of the pool of each example (padding points at the client's first row).
    weight : Tensor, shape (C, S, B)
        1 for real examples, 0 for padding (a last, partial batch).
    active : Tensor, shape (C, S), bool
        Whether client c takes step s (clients with fewer examples take fewer steps).
    steps : ndarray, shape (C,)
        Number of steps of each client.
    """

    index: torch.Tensor
    weight: torch.Tensor
    active: torch.Tensor
    steps: np.ndarray
    index_np: np.ndarray | None = None
    valid_np: np.ndarray | None = None


def make_batches(pool: ClientPool, client_ids: Sequence[int], key: RoundKey, *, epochs: int, batch_size: int,
                 dtype: torch.dtype = torch.float32) -> RoundBatches:
    """Shuffle each sampled client's data per epoch and cut it into mini-batches of ``batch_size``.

    Client c's permutation in epoch e is ``key.numpy(c, e).permutation(n_c)`` (FedAvg's
    ClientUpdate, McMahan et al. 2017, Alg. 1: E epochs of batches of size B; the last batch of an
    epoch may be smaller).

    Parameters
    ----------
    pool : ClientPool
        All clients' data.
    client_ids : sequence of int
        The C sampled clients, in the order of the result's client axis.
    key : RoundKey
        The round's randomness.
    epochs, batch_size : int
        E and B.
    dtype : torch.dtype
        Of the weights.

    Returns
    -------
    RoundBatches
        With S = max_c E·ceil(n_c / B) steps.

    Raises
    ------
    ValueError
        For ``epochs < 1`` or ``batch_size < 1``.
    """
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    sizes = pool.sizes()
    per_epoch = [math.ceil(int(sizes[c]) / batch_size) for c in client_ids]
    steps = np.array([epochs * s for s in per_epoch], dtype=np.int64)
    S, C, B = int(steps.max()), len(client_ids), batch_size
    index = np.zeros((C, S, B), dtype=np.int64)
    weight = np.zeros((C, S, B))
    for i, c in enumerate(client_ids):
        n, lo = int(sizes[c]), int(pool.offsets[c])
        index[i] = lo
        pad = per_epoch[i] * B - n
        for e in range(epochs):
            perm = key.numpy(c, e).permutation(n)
            blk = np.concatenate([perm, np.zeros(pad, dtype=np.int64)]).reshape(per_epoch[i], B) + lo
            w = np.concatenate([np.ones(n), np.zeros(pad)]).reshape(per_epoch[i], B)
            rows = slice(e * per_epoch[i], (e + 1) * per_epoch[i])
            index[i, rows], weight[i, rows] = blk, w
    active = np.arange(S)[None, :] < steps[:, None]
    dev = pool.x.device
    return RoundBatches(_to_device(index, dev), _to_device(weight, dev, dtype), _to_device(active, dev), steps,
                        index, weight.sum(2).astype(np.int64))


def _to_device(a: np.ndarray, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a`` as a tensor on ``device``; to a GPU through pinned memory without blocking the host.

    A plain host-to-GPU copy of pageable memory synchronises the stream (``torch.cuda.set_sync_debug_mode``
    flags it); the round's batch tables are copied asynchronously instead, so a round has no host sync.
    """
    t = torch.from_numpy(np.ascontiguousarray(a))
    if dtype is not None:
        t = t.to(dtype)
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


# Over 80 lines: its signature and NumPy docstring name 17 hooks and options (74 lines); the body is 38.
def local_sgd(
    module: nn.Module,
    global_params: Params,
    pool: ClientPool,
    client_ids: Sequence[int],
    key: RoundKey,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    path: str = "auto",
    regularizer: Regularizer | None = None,
    grad_transform: GradTransform | None = None,
    shared: dict[str, Any] | None = None,
    per_client: dict[str, Any] | None = None,
    per_client_rows: Sequence[int] | None = None,
    perturb: Perturb | None = None,
    on_client: OnClient | None = None,
) -> LocalResult:
    """Run E epochs of mini-batch SGD from ``global_params`` on every sampled client.

    Parameters
    ----------
    module : nn.Module
        The model, applied functionally.
    global_params : dict[str, Tensor]
        Starting point of every client (the server model).
    pool : ClientPool or FilePool
        All clients' data on the run's device, or a FilePool (then the streamed path runs, with the
        pool's local optimiser; ``path`` is ignored).
    client_ids : sequence of int
        The sampled clients (C of them), in the order of the result's client axis.
    key : RoundKey
        Randomness of this round; client c's batches come from ``key.numpy(c, epoch)``.
    epochs : int
        E, local epochs.
    batch_size : int
        B.
    lr : float
        Client step size η.
    path : {"auto", "batched", "sequential"}
        Execution path (same result up to rounding); "auto" takes :func:`choose_path`.
    regularizer, grad_transform : callable, optional
        Hooks of the local objective and step (module docstring).
    shared, per_client : dict, optional
        The hooks' context; ``per_client`` tensors have a leading axis of size C (row i: ``client_ids[i]``),
        or of any size when ``per_client_rows`` is given.
    per_client_rows : sequence of int, optional
        C rows of the ``per_client`` tensors: row ``per_client_rows[i]`` is ``client_ids[i]``'s. The sequential
        and streamed paths read those rows in place, so a state that keeps a tensor per client for all N
        clients (SCAFFOLD's control variates, (N, ...)) is not copied for the round; the batched path gathers
        them. The same result as passing the gathered (C, ...) tensors.
    perturb : callable, optional
        ``perturb(params, x, y) -> x'`` (one client's batch; vmapped over clients on the batched path).
        The SGD step is then taken on the loss at x' (inputs detached), and ``extras["rho2"]`` holds each
        client's mean ‖x' − x‖² over its local examples and steps, shape (C,).
    on_client : callable, optional
        ``on_client(i, params, steps)``, called once per sampled client in client order with its final
        parameters (``client_ids[i]``'s; dict of tensors valid only during the call: copy what must outlive
        it) and its number of local steps K_i, under ``torch.no_grad()``. The result's ``params`` is then
        empty: a reduction that needs each client model once (SCAFFOLD's sums on a FilePool) never holds
        more than one of them on the sequential and streamed paths, which train client after client; the
        batched path trains them together and hands them over row by row afterwards.

    Returns
    -------
    LocalResult

    Raises
    ------
    ValueError
        For an unknown path, a ``per_client`` tensor whose leading size is not C (without
        ``per_client_rows``), or ``per_client_rows`` of another length than C or outside a tensor's rows.
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    C = len(client_ids)
    shared, per_client = shared or {}, per_client or {}
    if per_client_rows is None:
        rows = list(range(C))
        for k, v in tree_leaves(per_client):
            if v.shape[0] != C:
                raise ValueError(f"per_client[{k!r}] has leading size {v.shape[0]}, expected {C} clients")
    else:
        rows = [int(r) for r in per_client_rows]
        if len(rows) != C:
            raise ValueError(f"per_client_rows has {len(rows)} rows, expected {C} clients")
        for k, v in tree_leaves(per_client):
            if rows and not 0 <= min(rows) <= max(rows) < v.shape[0]:
                raise ValueError(f"per_client_rows {rows} outside the {v.shape[0]} rows of per_client[{k!r}]")
    if isinstance(pool, FilePool):
        if perturb is not None:
            raise ValueError("perturb is not supported on a FilePool")
        return streamed_sgd(module, global_params, pool, client_ids, key, epochs, batch_size, lr, regularizer,
                         grad_transform, shared, per_client, rows, on_client)
    batches = make_batches(pool, client_ids, key, epochs=epochs, batch_size=batch_size,
                           dtype=next(iter(global_params.values())).dtype)
    if path == "auto":
        path = choose_path(module, pool.x.device)
    if path == "batched":
        if per_client_rows is not None:
            per_client = gather_rows(per_client, rows)
        res = batched_sgd(module, global_params, pool, batches, lr, regularizer, grad_transform, shared, per_client,
                       perturb)
        if on_client is not None:
            with torch.no_grad():
                for i in range(C):
                    on_client(i, {k: v[i] for k, v in res.params.items()}, int(res.steps[i]))
            res.params = {}
        return res
    return sequential_sgd(module, global_params, pool, batches, lr, regularizer, grad_transform, shared, per_client,
                       perturb, rows, on_client)

