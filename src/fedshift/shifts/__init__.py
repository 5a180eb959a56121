"""The shift contract of the shift matrix, the common data, and the registry of shifts.

A shift is one module of this package with one :class:`Shift` subclass, registered by ``kind`` in :data:`SHIFTS`.
It says, for one seed, how the clients' labelled training data are drawn (:meth:`Shift.partition`), which
held-out populations the methods are validated and tested on (:meth:`Shift.populations`: the validation
population is drawn like the test population, from held-out *training* data, never from the test split), what a
method may know besides its clients' labelled data (:meth:`Shift.side`, keys :attr:`Shift.side_information`),
and how a model is scored on a population (:meth:`Shift.metric`). Kinds: ``none`` (i.i.d. and Dirichlet control),
``label`` (FedPALS §5), ``mixture`` (AFL / AgnosticFedAvg domains), ``adversarial`` (WAFL §6 PGD shift),
``domain`` (FedMM / WAFL Table 2 unlabelled target), ``generalization`` (unseen target domain) and ``feature``
(a transformation per client).

Common data (:func:`load_images`): every dataset of a shift as one grey square image format in [0, 1],
flattened, so that one model family (MLR, the small CNN ``cnn2``) fits every shift. The format is read from the
data registry (:data:`fedshift.data.registry.FACTS`), never assumed: its side is the side of the shift's first
dataset (:attr:`Shift.image_side`; 28 for MNIST and Fashion-MNIST), its classes the most of its datasets'
(:attr:`Shift.num_labels`). Other sides (USPS 16×16, MNIST-M 32×32 RGB by channel mean) are resized bilinearly
(``torch.nn.functional.interpolate``); images of the common side are kept as they are (x / 255, as a paper
pipeline that reads grey images with ``scale: 255`` does, so a label-shift cell sees the bytes that pipeline
sees).

The package and every shift module import no torch at their top: the plan (the shift matrix's experiments, its
schema and protocol checks, the n/a cells) reads the shift classes only; the tensor code imports torch where it
runs, in the job.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedshift.algorithms.registry import SIDE_INFORMATION as _SIDE_INFORMATION
from fedshift.plugins import load_plugins as _load_plugins

if TYPE_CHECKING:  # the plan imports no torch: the tensor code below imports it where it runs
    import torch

    from fedshift.core.base import ClientData

__all__ = ["Segment", "Partition", "Population", "Instance", "Shift", "SHIFTS", "register_shift", "load_images",
           "images", "accuracy_by_group", "SIDE_INFORMATION", "discover", "load_plugins",
           "shift_of", "shift_module_file", "demand_problems"]

#: Side information a shift may give (algorithms declare what they need, ``registry.register(..., needs=...)``).
SIDE_INFORMATION = _SIDE_INFORMATION  # the algorithm layer's vocabulary (fedshift.algorithms.registry)


@dataclass(frozen=True)
class Segment:
    """Rows of one split of one dataset: ``indices`` into ``data[dataset][split]``, all in group ``group``.

    ``group`` is the rows' domain (mixture and domain shifts) or client (adversarial shift) id; ``labelled`` is
    False for the unlabelled target inputs of the domain shift (their labels are never read).
    """

    dataset: str
    split: str
    indices: np.ndarray
    group: int = 0
    labelled: bool = True


@dataclass
class Partition:
    """One seed's draw: each client's labelled training rows, the validation and test rows, the side rows.

    Attributes
    ----------
    clients : list of Segment
        Client i's labelled training data (its ``group`` is the client's domain id).
    validation, test : list of Segment
        The validation population (held-out training rows) and the test population.
    unlabelled : list of Segment
        Unlabelled target inputs (domain shift), one segment per client that holds them; empty otherwise.
    info : dict
        What else the draw fixed (label marginals S and T, attacked fractions, ...), JSON-able.
    """

    clients: list[Segment]
    validation: list[Segment]
    test: list[Segment]
    unlabelled: list[Segment] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def rows(self, role: str) -> set[tuple[str, str, int]]:
        """Every (dataset, split, index) of ``role`` ∈ {"clients", "validation", "test", "unlabelled"}."""
        return {(s.dataset, s.split, int(i)) for s in getattr(self, role) for i in s.indices}


@dataclass(frozen=True)
class Population:
    """An evaluation population: inputs ``x`` (n, side²), labels ``y`` (n,), group ids ``group`` (n,) (numpy)."""

    x: torch.Tensor
    y: torch.Tensor
    group: np.ndarray


@dataclass
class Instance:
    """One seed of one shift, on a device: the clients, the two populations and the side information given.

    ``image_side`` and ``num_labels`` are the shift's common format (:attr:`Shift.image_side`,
    :attr:`Shift.num_labels`): inputs are (n, image_side²), labels in 0 … num_labels − 1.
    """

    clients: list[ClientData]
    validation: Population
    test: Population
    side: dict[str, Any]
    partition: Partition
    image_side: int
    num_labels: int


def images(prepared: Mapping[str, Any], split: str, idx: np.ndarray | Sequence[int], side: int | None = None
           ) -> torch.Tensor:
    """Rows ``idx`` of ``prepared["x_<split>"]`` in the common format: float32 (n, side²) in [0, 1].

    Grey images of side ``side`` are x / 255 flattened (as a paper pipeline reading grey images with
    ``scale: 255``). Other sizes are resized bilinearly to side × side (``align_corners=False``); RGB (n, H, W, 3)
    images first become grey by their channel mean. ``side`` None keeps square images at their own side.

    Raises
    ------
    ValueError
        For an array that is not (n, H, W) or (n, H, W, 3).
    """
    import torch
    import torch.nn.functional as F

    x = prepared[f"x_{split}"][torch.as_tensor(np.asarray(idx, dtype=np.int64))]
    if x.dim() == 4 and x.shape[-1] == 3:
        x = x.to(torch.float32).mean(-1)
    elif x.dim() != 3:
        raise ValueError(f"images: expected (n, H, W) or (n, H, W, 3), got {tuple(x.shape)}")
    x = x.to(torch.float32)
    side = x.shape[1] if side is None else side
    if tuple(x.shape[1:]) != (side, side):
        x = F.interpolate(x[:, None], size=(side, side), mode="bilinear", align_corners=False)[:, 0]
    return (x.flatten(1) / 255.0).contiguous()


def load_images(paths: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The prepared datasets ``{name: data/prepared/<name>.pt}`` (:func:`fedshift.data.prepare.load_prepared`)."""
    from fedshift.data.prepare import load_prepared

    return {name: load_prepared(p) for name, p in paths.items()}


def _materialize(data: Mapping[str, Mapping[str, Any]], segments: Sequence[Segment], device: Any, side: int
                 ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    import torch

    xs = [images(data[s.dataset], s.split, s.indices, side) for s in segments]
    ys = [data[s.dataset][f"y_{s.split}"][torch.as_tensor(s.indices, dtype=torch.int64)] for s in segments]
    group = np.concatenate([np.full(len(s.indices), s.group, dtype=np.int64) for s in segments])
    return torch.cat(xs).to(device), torch.cat(ys).to(torch.int64).to(device), group


def accuracy_by_group(correct: torch.Tensor, group: np.ndarray) -> dict[int, float]:
    """Mean of ``correct`` (n,) bool within each group id of ``group`` (n,)."""
    c = correct.cpu().numpy().astype(np.float64)
    return {int(g): float(c[group == g].mean()) for g in np.unique(group)}


class Shift:
    """The contract of one kind of shift (subclass it in one module and decorate it with :func:`register_shift`).

    Parameters
    ----------
    name : str
        The experiment (matrix column group) name.
    params : mapping
        The shift's config entry ``shift_matrix.shifts.<name>`` (``kind`` and the kind's own keys).

    Attributes
    ----------
    kind : str
        Registered kind.
    side_information : frozenset of str
        What the shift lets a method know (⊆ :data:`SIDE_INFORMATION`); an algorithm that needs more is "n/a".
    schema : dict or None
        JSON schema of the kind's own keys (``kind``, ``description`` and ``columns`` are common to all), for a
        kind the shift matrix's ``schema.yaml`` does not describe (a shift plug-in); checked before any job.
    """

    kind: ClassVar[str] = ""
    side_information: ClassVar[frozenset[str]] = frozenset()
    schema: ClassVar[dict[str, Any] | None] = None

    def __init__(self, name: str, params: Mapping[str, Any]):
        self.name, self.params = name, dict(params)

    @classmethod
    def protocol(cls, params: Mapping[str, Any], sizes: Callable[[str, str], int | None]) -> list[tuple[str, str]]:
        """The conditions that keep this shift's column honest, checked on its config entry before any job.

        Declared by each kind next to its schema (unseen really unseen, validation never the test distribution,
        counts and sizes within the data registry's splits); the base class has none.

        Parameters
        ----------
        params : mapping
            The shift's config entry (schema-valid).
        sizes : callable
            ``sizes(dataset, split)``: rows of that split (:attr:`fedshift.data.registry.DatasetFacts.splits`), or
            None when unknown.

        Returns
        -------
        list of (str, str)
            ``(key, problem)`` for each violated condition, ``key`` relative to the entry (``"test_size"``).
        """
        return []

    # ---- what a subclass implements -------------------------------------------------------------------------
    def datasets(self) -> list[str]:
        """Registry datasets the shift reads: the one ``params["dataset"]`` unless a shift overrides it."""
        return [self.params["dataset"]]

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """The clients' labelled rows and the held-out rows of one seed (deterministic in ``seed``)."""
        raise NotImplementedError

    def metrics(self) -> list[str]:
        """The metric names :meth:`metric` returns; the first is the primary one (the matrix column)."""
        return ["accuracy"]

    def columns(self) -> list[str]:
        """The metrics that are matrix columns by default; the shift's config ``columns`` overrides them.

        Default: every metric of :meth:`metrics`.
        """
        return self.metrics()

    def metric(self, module: torch.nn.Module, params: dict[str, torch.Tensor], population: Population, *,
               role: str, seed: int) -> dict[str, float]:
        """Scores of a model on a population (higher is better); default: accuracy.

        ``role`` is ``"validation"`` or ``"test"`` (the adversarial shift attacks other clients on each).
        """
        import torch

        from fedshift.models import forward

        with torch.no_grad():
            correct = forward(module, params, population.x).argmax(1) == population.y
        return {"accuracy": float(correct.double().mean())}

    # ---- derived ---------------------------------------------------------------------------------------------
    def check_protocol(self, data: Mapping[str, Mapping[str, Any]]) -> None:
        """:meth:`protocol` on the loaded data's own split sizes (a partition's first step).

        Raises
        ------
        ValueError
            Naming ``shift_matrix.shifts.<name>.<key>`` and the first violated condition.
        """
        def sizes(dataset: str, split: str) -> int | None:
            return len(data[dataset][f"y_{split}"]) if f"y_{split}" in data.get(dataset, {}) else None

        for key, problem in self.protocol(self.params, sizes):
            raise ValueError(f"shift_matrix.shifts.{self.name}.{key}: {problem}")

    @property
    def image_side(self) -> int:
        """Side of the shift's common grey square image format: its first dataset's (the data registry's
        ``image_shape``, :data:`fedshift.data.registry.FACTS`); every other dataset is resized to it.

        Raises
        ------
        KeyError
            For a dataset that is not a registered image dataset.
        """
        from fedshift.data.registry import FACTS

        first = self.datasets()[0]
        shape = FACTS[first].image_shape if first in FACTS else None
        if shape is None:
            raise KeyError(f"shift {self.name}: dataset {first!r} is not a registered image dataset")
        return int(shape[-1])

    @property
    def num_labels(self) -> int:
        """Classes of the shift's label space: the most of its datasets' ``num_classes`` (the data registry)."""
        from fedshift.data.registry import FACTS

        return max(FACTS[d].num_classes for d in self.datasets())

    def populations(self, data: Mapping[str, Mapping[str, Any]], partition: Partition, device: Any = "cpu"
                    ) -> dict[str, Population]:
        """``{"validation": ..., "test": ...}`` of ``partition`` on ``device``."""
        return {role: Population(*_materialize(data, getattr(partition, role), device, self.image_side))
                for role in ("validation", "test")}

    def side(self, data: Mapping[str, Mapping[str, Any]], partition: Partition, device: Any = "cpu"
             ) -> dict[str, Any]:
        """The side information the shift gives (keys :attr:`side_information`); default none."""
        return {}

    def instance(self, data: Mapping[str, Mapping[str, Any]], seed: int, device: Any = "cpu") -> Instance:
        """Everything one seed of a cell trains and is evaluated on."""
        from fedshift.core.base import ClientData

        part = self.partition(data, seed)
        clients = []
        for i, seg in enumerate(part.clients):
            x, y, _ = _materialize(data, [seg], device, self.image_side)
            clients.append(ClientData(i, x, y, seg.group))
        pops = self.populations(data, part, device)
        side = self.side(data, part, device)
        if set(side) != set(self.side_information):
            raise RuntimeError(f"shift {self.name}: side() gave {sorted(side)}, "
                               f"declared {sorted(self.side_information)}")
        return Instance(clients, pops["validation"], pops["test"], side, part, self.image_side, self.num_labels)


#: Registered kind → Shift subclass (filled by the ``@register_shift`` lines of this package's modules, which
#: :func:`discover` imports, and of shift plug-ins, :func:`load_plugins`).
SHIFTS: dict[str, type[Shift]] = {}


def discover() -> dict[str, type[Shift]]:
    """Import every module of this package once, so that its ``@register_shift`` lines fill :data:`SHIFTS`.

    Shifts are discovered like algorithms: a new shift is one module here (or a plug-in file) and no list
    names it. Returns :data:`SHIFTS`.
    """
    if not _DISCOVERED:  # the package's modules do not change within a process: list and import them once
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        _DISCOVERED.append(True)
    return SHIFTS


_DISCOVERED: list[bool] = []


def load_plugins(targets: Any, *, where: str = "shift_plugins") -> dict[str, tuple[str, ...]]:
    """Import shift plug-ins (config ``shift_plugins``: ``.py`` files or module names) that register new kinds.

    Raises
    ------
    fedshift.errors.ConfigError
        ``shift_plugins[i]``: a missing file, an import that fails, or a target that registers no shift kind.
    """
    return _load_plugins(targets, where=where, table=SHIFTS, what="shift kind", discover=discover)


def shift_module_file(kind: str) -> str:
    """The source file of shift ``kind``'s module: what a run of that shift executes by a computed name.

    A matrix run's code hash covers it (:attr:`fedshift.contract.RunSpec.modules`), so editing one shift
    reruns that shift's cells only.
    """
    discover()
    return str(Path(sys.modules[SHIFTS[kind].__module__].__file__).resolve())


def register_shift(cls: type[Shift]) -> type[Shift]:
    """Class decorator: register a :class:`Shift` subclass under its ``kind``."""
    if not cls.kind or cls.kind in SHIFTS and SHIFTS[cls.kind] is not cls:
        raise ValueError(f"shift kind {cls.kind!r} is empty or taken")
    if not cls.side_information <= SIDE_INFORMATION:
        unknown = sorted(cls.side_information - SIDE_INFORMATION)
        raise ValueError(f"shift {cls.kind}: unknown side information {unknown}")
    SHIFTS[cls.kind] = cls
    return cls


def shift_of(name: str, params: Mapping[str, Any]) -> Shift:
    """The shift of config entry ``shift_matrix.shifts.<name>`` (``params["kind"]`` selects the class).

    Raises
    ------
    KeyError
        For an unknown kind (listing the known ones).
    """
    discover()
    kind = params["kind"]
    if kind not in SHIFTS:
        raise KeyError(f"shift_matrix.shifts.{name}.kind: unknown kind {kind!r}; known: {sorted(SHIFTS)}")
    return SHIFTS[kind](name, params)


def demand_problems(demands: Sequence[tuple[str, str, str, int]], sizes: Callable[[str, str], int | None]
                    ) -> list[tuple[str, str]]:
    """``(key, problem)`` for each ``(key, dataset, split, rows asked)`` that asks more rows than the split holds.

    For :meth:`Shift.protocol`: the rows a partition draws from one split (:func:`split_rows` would fail in the job).
    """
    out = []
    for key, dataset, split, asked in demands:
        have = sizes(dataset, split)
        if have is not None and asked > have:
            out.append((key, f"asks {asked} rows of {dataset}'s {split} split, which holds {have}"))
    return out


def split_rows(rng: np.random.Generator, pool: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Disjoint sorted random subsets of ``pool`` of the given sizes (in order).

    Raises
    ------
    ValueError
        When the pool holds fewer rows than asked for.
    """
    if sum(sizes) > len(pool):
        raise ValueError(f"asked for {sum(sizes)} rows of a pool of {len(pool)}")
    perm = rng.permutation(pool)
    out, at = [], 0
    for n in sizes:
        out.append(np.sort(perm[at: at + n]))
        at += n
    return out
