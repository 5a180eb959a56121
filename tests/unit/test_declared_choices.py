"""String choices (``path``, AFL's estimators, ``domain_algorithm``, WAFL's ``cost``, ...) declared once as ``Literal``.

A choice is the settings field's type (:mod:`fedshift.algorithms.declarations`); the config schema refuses a value
outside it before any job, naming the key path and the choices, and the registered factory refuses it on a direct
call, so no factory body repeats the check.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_config_validation import base, edited  # noqa: E402

from fedshift.algorithms.declaration_checks import check_factory, choice_errors  # noqa: E402
from fedshift.algorithms.declarations import (  # noqa: E402
    LocalPath,
    RoundSettings,
    choices_of,
    settings_choices,
    type_text,
)
from fedshift.validation import validate_workflow_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "workflow" / "schemas"
FX = ("shift_matrix", "fixed")


def _fixed(alg: str, values: dict) -> dict:
    """The merged config with ``values`` added to ``shift_matrix.fixed.<alg>`` (its other settings kept)."""
    return edited(None, (*FX, alg), {**(base(None)["shift_matrix"]["fixed"].get(alg) or {}), **values})


def _refusal(alg: str, values: dict) -> str:
    """The message with which the workflow's pre-job validation refuses ``values`` in ``shift_matrix.fixed.<alg>``."""
    with pytest.raises(ValueError) as err:
        validate_workflow_config(_fixed(alg, values), SCHEMAS)
    return str(err.value)


@pytest.mark.parametrize(("alg", "key", "bad", "allowed"), [
    ("fedavg", "path", "fast", "'auto', 'batched', 'sequential'"),
    ("scaffold", "path", "streamed", "'auto', 'batched', 'sequential'"),
    ("afl", "w_gradient", "perclient", "'perdomain', 'weighted'"),
    ("afl", "lambda_gradient", "weighted", "'perdomain', 'uniform'"),
    ("afl", "init_lambda", "skewed", "'uniform', 'empirical'"),
    ("agnostic_fedavg", "domain_algorithm", "pgd", "'eg', 'none'"),
    ("wafl", "cost", "half", "'paper', 'code'"),
    ("fedavg", "server_optimizer", "adamw", "'sgd', 'adagrad', 'adam'"),
    ("afl", "optimizer", "adamw", "'sgd', 'adagrad', 'adam'"),
])
def test_a_bad_choice_is_refused_before_any_job_naming_the_key_path_and_the_choices(alg, key, bad, allowed):
    msg = _refusal(alg, {key: bad})
    assert msg.startswith(f"config error at shift_matrix.fixed.{alg}.{key}: {bad!r} is not one of {allowed} "), msg
    assert f"declared where {alg!r} is registered" in msg, msg


def test_a_bad_choice_in_a_grid_is_refused_naming_its_place():
    grid = {**base(None)["shift_matrix"]["grids"]["fedprox"], "path": ["fast"]}  # one value: the size stays
    with pytest.raises(ValueError, match=r"^config error at shift_matrix\.grids\.fedprox\.path\[0\]\.path: 'fast' is "
                                         r"not one of 'auto', 'batched', 'sequential'"):
        validate_workflow_config(edited(None, ("shift_matrix", "grids", "fedprox"), grid), SCHEMAS)


def _declared_choices():
    """(algorithm, key, choices) for every Literal-typed config key of every registered algorithm."""
    from fedshift.algorithms import registry

    return [(n, k, c) for n in registry.names() for k, t in registry.get(n).hparams.items()
            if (c := choices_of(t)) is not None]


def test_every_declared_choice_is_refused_outside_and_accepted_inside_before_any_job():
    walked = _declared_choices()
    assert {k for _, k, _ in walked} >= {"path", "w_gradient", "lambda_gradient", "init_lambda", "domain_algorithm",
                                         "init_domain_weights", "cost", "step_rule", "server_optimizer", "optimizer"}
    for alg, key, allowed in walked:
        msg = _refusal(alg, {key: "no_such_choice"})
        assert msg.startswith(f"config error at shift_matrix.fixed.{alg}.{key}: 'no_such_choice' is not one of "
                              f"{', '.join(map(repr, allowed))}"), (alg, key, msg)
    for alg, key, allowed in walked[:6]:  # each value of a few keys passes (the walk above is the costly part)
        for value in allowed:
            validate_workflow_config(_fixed(alg, {key: value}), SCHEMAS)


def test_a_direct_or_registry_call_meets_the_same_choices_and_numbers_are_untouched():
    """Library use: the registered factory refuses a value outside its choices (the body no longer checks)."""
    from fedshift.algorithms import registry
    from fedshift.algorithms.fedavg import build_fedavg
    from fedshift.algorithms.fedopt import build_fedopt
    from fedshift.models import LogisticRegression

    module = LogisticRegression(4, 2)
    round_ = {"clients_per_round": 1, "local_epochs": 1, "batch_size": 1, "client_lr": 0.1}
    with pytest.raises(ValueError, match=r"build_fedavg: hyper-parameter 'path' = 'fast' is not one of 'auto', "
                                         r"'batched', 'sequential'$"):
        build_fedavg(module, **round_, path="fast")
    with pytest.raises(ValueError, match=r"^algorithm 'fedavg': hyper-parameter 'path' = 'fast' is not one of"):
        registry.get("fedavg").build(module, **round_, path="fast")
    with pytest.raises(ValueError, match=r"'kind' = 'sgd' is not one of 'adagrad', 'yogi', 'adam'"):
        build_fedopt(module, kind="sgd", **round_)  # a fixed keyword: no config sets it, the factory still refuses
    for path in typing.get_args(LocalPath):
        assert build_fedavg(module, **round_, path=path).name == "fedavg"


def test_the_declared_choices_are_the_ones_the_code_acts_on():
    """Each Literal lists exactly the values its consumer implements (one source: the consumers read it or agree)."""
    from fedshift.algorithms import adversarial, afl, agnostic_fedavg, fedopt, sgda, wafl
    from fedshift.algorithms.decl.afl import LambdaGradient, WGradient
    from fedshift.algorithms.decl.wafl import Cost, StepRule
    from fedshift.algorithms.declarations import OptimizerName, declared
    from fedshift.core.engine import PATHS
    from fedshift.core.optim import OPTIMIZERS

    assert typing.get_args(LocalPath) == PATHS
    assert typing.get_args(OptimizerName) == tuple(OPTIMIZERS)
    assert set(typing.get_args(Cost)) == set(adversarial.COSTS)
    assert set(typing.get_args(StepRule)) == set(adversarial.STEP_RULES)
    assert (afl.W_GRADIENTS, afl.LAMBDA_GRADIENTS) == (typing.get_args(WGradient), typing.get_args(LambdaGradient))
    assert agnostic_fedavg.DOMAIN_ALGORITHMS == ("eg", "none")
    # the kind each registered name fixes is one of its factory's declared kinds, and every kind is some name's
    for module in (fedopt, sgda, wafl):
        fixed = {d.fixed["kind"] for d in declared().values() if d.module == module.__name__}
        assert fixed == set(module.KINDS), module.__name__
    # AFL's paper schema spells its estimators out: the same values
    schema = yaml.safe_load((ROOT / "src/fedshift/papers/afl/schema.yaml").read_text())
    enums = {}

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, dict) and "enum" in v:
                    enums.setdefault(k, v["enum"])
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(schema)
    assert enums["w_gradient"] == list(typing.get_args(WGradient))
    assert enums["lambda_gradient"] == list(typing.get_args(LambdaGradient))
    assert enums["optimizer"] == list(typing.get_args(OptimizerName))


def test_a_literal_reads_as_its_set_of_values_and_the_factory_check_compares_it():
    assert type_text(LocalPath) == "{'auto', 'batched', 'sequential'}"
    assert type_text(typing.Sequence[float] | typing.Literal["uniform"]) == "Sequence[float] | {'uniform'}"
    assert settings_choices(RoundSettings) == {"server_optimizer": ("sgd", "adagrad", "adam"),
                                               "path": ("auto", "batched", "sequential")}
    assert choices_of(str) is None and choices_of(typing.Annotated[LocalPath, "x"]) == typing.get_args(LocalPath)
    assert choice_errors({"path": ("auto",)}, {"path": ["not", "a", "string"]}) == []  # left to the type check

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Settings:
        path: LocalPath = "auto"

    def plain(module, *, path: str = "auto"):
        return module

    def declared_as(module, *, path: LocalPath = "auto"):
        return module

    with pytest.raises(ValueError, match="'path' is <class 'str'> in the factory"):
        check_factory("toy", plain, Settings, {})
    check_factory("toy", declared_as, Settings, {})
