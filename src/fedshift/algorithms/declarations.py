"""How algorithms are declared without torch: settings dataclasses, ranges, side information, loop, model parts.

Planning (config validation, the workflow's plan, the shift matrix's n/a cells, the docs) reads the algorithms'
declarations as Python objects, importing no algorithm module and parsing no source. An algorithm's hyper-parameters
are one frozen dataclass of typed, keyword-only fields with their defaults (its config keys); a field's allowed range
is ``typing.Annotated`` metadata (an :class:`Interval`); a string setting's allowed values are its type, a
``typing.Literal`` (:data:`LocalPath`, read by :func:`choices_of`). The round's common settings are declared once here
(:class:`ClientRound`, :class:`ServerOptimizer`, :class:`RoundSettings`) and extended by each algorithm's settings, as
FedJAX passes the client optimiser and batch settings as objects.

Each algorithm module ``fedshift.algorithms.<m>`` has a torch-free twin ``fedshift.algorithms.decl.<m>`` holding its
settings and its :class:`AlgorithmDeclaration` s; :func:`declared` collects them. The algorithm module passes each
declaration to :func:`fedshift.algorithms.registry.register`, which checks at import that the factory's keyword-only
parameters are the settings' fields, with the same types and defaults (a mismatch fails loudly, naming the algorithm).
A plug-in declares its algorithm the same way (a settings dataclass and a declaration) or on its register line.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

__all__ = ["Interval", "CodeDefault", "SIDE_INFORMATION", "LOOPS", "MODEL_PARTS", "COUNT", "POSITIVE", "NON_NEGATIVE",
           "UNIT", "Count", "Step", "Weight", "Code", "LocalPath", "OptimizerName", "ClientRound", "ServerOptimizer", "ServerStepRound",
           "RoundSettings", "PAYLOAD_NETWORKS", "Payload", "MODEL_EACH_WAY", "AlgorithmDeclaration", "type_text",
           "settings_fields", "settings_bounds", "choices_of", "settings_choices", "code_only", "declared",
           "PACKAGE_DIR"]

#: The side-information vocabulary: what an algorithm may need beyond its clients' labelled data, and what a shift
#: may give (:attr:`fedshift.shifts.Shift.side_information`): the target's label marginal T (FedPALS), each
#: client's domain id (AFL / AgnosticFedAvg), unlabelled target images (FedMM, DANN).
SIDE_INFORMATION = frozenset({"target_label_marginal", "domain_ids", "unlabelled_target"})

#: How an algorithm trains: ``"round"``, the common round over a list of clients (``apply(state, clients, key)`` of
#: :class:`~fedshift.core.base.FederatedAlgorithm`, driven by :func:`fedshift.core.training.run_training`);
#: ``"own"``, a training loop of its own (Stochastic-AFL, the DANN/SGDA family), which a caller such as the shift
#: matrix reaches through the algorithm's ``cell`` hook.
LOOPS = frozenset({"round", "own"})

#: The parts of a model an algorithm may need: a feature extractor and a classification head on its features (the
#: DANN family, FedSR); empty: any model.
MODEL_PARTS = frozenset({"features", "head"})

#: The package folder (``src/fedshift``): where a declared algorithm's module file lies.
PACKAGE_DIR = Path(__file__).resolve().parents[1]

_INF = float("inf")


@dataclass(frozen=True)
class Interval:
    """The allowed range of a numeric hyper-parameter, written as in mathematics: ``"[0, 1)"``, ``"(0, inf)"``.

    Declared once, on the settings field (``Annotated[float, Interval.parse("[0, 1)")]``); the registry's check
    and the config schema both read it.

    Attributes
    ----------
    lo, hi : float
        The ends (``-inf`` / ``inf`` for an open side).
    lo_closed, hi_closed : bool
        Whether the end belongs to the range (``[`` / ``]``).
    """

    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        """The interval written ``text``: ``[`` or ``(``, two numbers (``inf``, ``-inf`` allowed), ``]`` or ``)``.

        Raises
        ------
        ValueError
            For any other form, an infinite end marked closed, or ``lo > hi``.
        """
        t = text.strip() if isinstance(text, str) else ""
        if len(t) < 5 or t[0] not in "[(" or t[-1] not in "])" or t.count(",") != 1:
            raise ValueError(f"interval {text!r} is not of the form '[lo, hi)' (brackets [ ] or ( ), ends numbers "
                             "or inf)")
        try:
            lo, hi = (float(x) for x in t[1:-1].split(","))
        except ValueError:
            raise ValueError(f"interval {text!r}: the ends must be numbers (or inf, -inf)") from None
        out = cls(lo, hi, t[0] == "[", t[-1] == "]")
        if (out.lo_closed and lo == -_INF) or (out.hi_closed and hi == _INF) or lo > hi:
            raise ValueError(f"interval {text!r} is empty or closes an infinite end")
        return out

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        above = value >= self.lo if self.lo_closed else value > self.lo
        below = value <= self.hi if self.hi_closed else value < self.hi
        return above and below

    def schema(self) -> dict[str, float]:
        """The JSON-schema keywords of the range (``minimum``/``exclusiveMinimum``, ``maximum``/...)."""
        out: dict[str, float] = {}
        if self.lo != -_INF:
            out["minimum" if self.lo_closed else "exclusiveMinimum"] = self.lo
        if self.hi != _INF:
            out["maximum" if self.hi_closed else "exclusiveMaximum"] = self.hi
        return out

    def __str__(self) -> str:
        def end(x: float) -> str:
            return "inf" if x == _INF else "-inf" if x == -_INF else f"{x:g}"
        return f"{'[' if self.lo_closed else '('}{end(self.lo)}, {end(self.hi)}{']' if self.hi_closed else ')'}"


@dataclass(frozen=True)
class CodeDefault:
    """The default of a setting that code supplies (a function of the algorithm module), named, never imported.

    Attributes
    ----------
    name : str
        The name of the default object in the factory's module (``"cross_entropy_loss"``).
    """

    name: str

    def __repr__(self) -> str:
        return self.name


COUNT = Interval.parse("[1, inf)")
POSITIVE = Interval.parse("(0, inf)")
NON_NEGATIVE = Interval.parse("[0, inf)")
UNIT = Interval.parse("[0, 1)")

#: A count of at least one (clients, epochs, examples, steps).
Count = Annotated[int, COUNT]
#: A step size or other strictly positive number.
Step = Annotated[float, POSITIVE]
#: A non-negative weight, penalty or rate.
Weight = Annotated[float, NON_NEGATIVE]
#: A function the code that builds the algorithm passes; a config file cannot set it.
Code = Callable[..., Any]
#: How the local updates of a round run (:func:`fedshift.core.engine.local_sgd`): ``"auto"`` picks the faster of
#: ``"batched"`` (all clients at once, vmapped) and ``"sequential"`` for the model and device.
LocalPath = Literal["auto", "batched", "sequential"]
#: An optimiser of :data:`fedshift.core.optim.OPTIMIZERS` (the server's on the pseudo-gradient, AFL's on w).
OptimizerName = Literal["sgd", "adagrad", "adam"]


@dataclass(frozen=True, kw_only=True)
class ClientRound:
    """The client side of a round: m clients sampled, E local epochs of mini-batch SGD with batch B and step η."""

    clients_per_round: Count
    local_epochs: Count
    batch_size: Count
    client_lr: Step


@dataclass(frozen=True, kw_only=True)
class ServerOptimizer:
    """The server side of a round: the optimiser applied to the pseudo-gradient −Δ (:mod:`fedshift.core.optim`)."""

    server_optimizer: OptimizerName = "sgd"
    server_lr: Step = 1.0
    server_optimizer_kwargs: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class ServerStepRound(ClientRound):
    """A round whose server takes a plain step of size ``server_lr`` on the averaged update (SCAFFOLD, FedNova)."""

    server_lr: Step = 1.0
    path: LocalPath = "auto"


@dataclass(frozen=True, kw_only=True)
class RoundSettings(ServerOptimizer, ClientRound):
    """FedAvg's round: :class:`ClientRound`, :class:`ServerOptimizer` and the local-update path."""

    path: LocalPath = "auto"


#: The networks a :class:`Payload` may name: the model the caller trains; that model with a domain discriminator on
#: its features (the DANN network, :func:`fedshift.algorithms.sgda.dann_network`); the model's features with a
#: stochastic representation head (:class:`fedshift.algorithms.fedsr.FedSRNet`).
PAYLOAD_NETWORKS = ("model", "discriminator", "representation")


@dataclass(frozen=True)
class Payload:
    """What one round sends per sampled client, in arrays of the size of the network the algorithm trains.

    Read by whatever counts a round's traffic (a bytes-per-round column); the algorithms state it, callers read it.

    Attributes
    ----------
    down, up : float
        Arrays server → client and client → server per sampled client (a round that samples two groups of m
        clients counts all its arrays over m). Scalars (n_i, a loss, λ over p domains) are left out.
    network : str
        One of :data:`PAYLOAD_NETWORKS`.

    Raises
    ------
    ValueError
        For a negative count or an unknown network.
    """

    down: float
    up: float
    network: str = "model"

    def __post_init__(self) -> None:
        if self.network not in PAYLOAD_NETWORKS:
            raise ValueError(f"Payload.network must be one of {PAYLOAD_NETWORKS}, not {self.network!r}")
        if not (self.down >= 0 and self.up >= 0):
            raise ValueError(f"Payload counts must be >= 0, not down={self.down}, up={self.up}")


#: FedAvg's round: the model down, the client's model (or its update, the same size) up.
MODEL_EACH_WAY = Payload(1, 1)


# ---- the table ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AlgorithmDeclaration:
    """Everything a caller needs to know about one registered algorithm without importing it.

    Attributes
    ----------
    name : str
        Registered name.
    module, factory : str
        The module whose ``@register(name)`` line registers the factory, and the factory's name in it.
    settings : type
        The frozen dataclass of its hyper-parameters (the config keys): typed fields, defaults and ranges.
    fixed : mapping
        Keyword arguments the name fixes (``{"kind": "adam"}``).
    needs : frozenset of str
        Side information it needs (:data:`SIDE_INFORMATION`).
    bounds : mapping of str to str
        Ranges beyond the settings' own: a name's narrower range on a shared factory's field (FedSGDA's one local
        step), a cross-knob product ``"a*b"`` (FedNova's η·μ < 1).
    loop : {"round", "own"}
        :data:`LOOPS`.
    model_parts : frozenset of str
        :data:`MODEL_PARTS` it needs.
    cell : str or None
        ``"module:function"`` of its shift-matrix hook.
    cell_settings : type or None
        A dataclass of the keys the hook reads itself (its keyword-only parameters: types, defaults, ranges).
    cell_supplies : frozenset of str
        The factory keywords the hook sets itself (no grid or fixed setting needs to give them).
    builds_on : str
        The factory's first parameter: ``"module"`` (the model) or what else it is built on (``"directions"``).
    payload : Payload or None
        The arrays one round sends per sampled client (:class:`Payload`); None where a round's traffic is no
        fixed count of model-sized arrays (Stochastic-AFL's S data-dependent steps) or is not stated.
    """

    name: str
    module: str
    factory: str
    settings: type
    fixed: Mapping[str, Any] = field(default_factory=dict)
    needs: frozenset[str] = frozenset()
    bounds: Mapping[str, str] = field(default_factory=dict)
    loop: str = "round"
    model_parts: frozenset[str] = frozenset()
    cell: str | None = None
    cell_settings: type | None = None
    cell_supplies: frozenset[str] = frozenset()
    builds_on: str = "module"
    payload: Payload | None = None


def type_text(hint: Any) -> str:
    """An annotation as source text: ``float``, ``float | None``, ``tuple[float, float]``, ``Callable[..., Any]``.

    A ``Literal`` is written as its set of values, as NumPy docstrings write a choice: ``{'auto', 'batched'}``.
    """
    if hint is type(None):
        return "None"
    if typing.get_origin(hint) is Literal:
        return "{" + ", ".join(repr(a) for a in typing.get_args(hint)) + "}"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in typing.get_args(hint))
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return repr(hint).replace("typing.", "").replace("collections.abc.", "")


def settings_fields(settings: type) -> dict[str, tuple[Any, Any]]:
    """Field name → (type, default) of a settings dataclass, in field order.

    The default is :data:`dataclasses.MISSING` for a required field; ``Annotated`` metadata is stripped from the type.

    Raises
    ------
    TypeError
        When ``settings`` is no dataclass.
    """
    hints = typing.get_type_hints(settings)
    return {f.name: (hints[f.name], f.default) for f in dataclasses.fields(settings)}


def settings_bounds(settings: type) -> dict[str, Interval]:
    """Field name → its declared :class:`Interval` (the ``Annotated`` metadata), for the fields that have one."""
    hints = typing.get_type_hints(settings, include_extras=True)
    out = {}
    for f in dataclasses.fields(settings):
        for meta in getattr(hints[f.name], "__metadata__", ()):
            if isinstance(meta, Interval):
                out[f.name] = meta
    return out


def choices_of(hint: Any) -> tuple[Any, ...] | None:
    """The values a ``Literal`` annotation allows (``Literal['a', 'b']`` → ``('a', 'b')``), else None.

    In a union, the Literal's values (``Sequence[float] | Literal['uniform']`` → ``('uniform',)``): a value of the
    Literal's type (a string) must be one of them, a value of another member is left to the type check. ``Annotated``
    metadata is looked through.
    """
    hint = getattr(hint, "__origin__", hint) if typing.get_origin(hint) is Annotated else hint
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [c for a in typing.get_args(hint) if (c := choices_of(a)) is not None]
        return tuple(v for c in found for v in c) if found else None
    return None


def settings_choices(settings: type) -> dict[str, tuple[Any, ...]]:
    """Field name → the values its ``Literal`` type allows (:func:`choices_of`), for the fields that have one."""
    return {k: c for k, (t, _) in settings_fields(settings).items() if (c := choices_of(t)) is not None}


def code_only(hint: Any) -> bool:
    """Whether a setting of type ``hint`` is code (a callable, possibly optional): set by code, never by a config."""
    if hint is object:
        return True
    origin = typing.get_origin(hint)
    if origin is Callable or hint is Callable:
        return True
    return origin in (typing.Union, types.UnionType) and any(code_only(a) for a in typing.get_args(hint)
                                                             if a is not type(None))


@functools.cache
def declared() -> dict[str, AlgorithmDeclaration]:
    """Registered name → :class:`AlgorithmDeclaration` of every built-in algorithm (``fedshift.algorithms.decl``).

    Imports the torch-free declaration modules only (by name: a job's code hash counts an algorithm's declaration
    through its algorithm module, which imports it).

    Raises
    ------
    ValueError
        When two declarations share a name.
    """
    package = importlib.import_module("fedshift.algorithms.decl")
    out: dict[str, AlgorithmDeclaration] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        for d in importlib.import_module(f"fedshift.algorithms.decl.{info.name}").DECLARATIONS:
            if d.name in out:
                raise ValueError(f"algorithm {d.name!r} is declared twice ({out[d.name].module}, {d.module})")
            out[d.name] = d
    return out
