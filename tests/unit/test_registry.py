"""The algorithm registry: one line registers an algorithm, papers build through it, names are checked."""

from __future__ import annotations

import copy
import dataclasses
from typing import Annotated

import pytest
import torch

from fedshift.algorithms import declarations, registry
from fedshift.algorithms.fedavg import build_fedavg
from fedshift.algorithms.fedprox import build_fedprox
from fedshift.algorithms.scaffold import build_scaffold
from fedshift.core.base import ClientData
from fedshift.core.rng import RoundKey
from fedshift.models import LogisticRegression, init_params
from fedshift.papers import agnostic_fedavg, fedmm, fedpals, wafl


def clients(sizes=(10, 14, 8), dim=4, k=3):
    g = torch.Generator().manual_seed(0)
    return [ClientData(i, torch.randn(n, dim, generator=g, dtype=torch.float64),
                       torch.randint(0, k, (n,), generator=g), 0) for i, n in enumerate(sizes)]


def final(alg, rounds=3):
    module = alg_module()
    state = alg.init(init_params(module, 0, dtype=torch.float64))
    for r in range(rounds):
        state, _ = alg.apply(state, clients(), RoundKey(7, r))
    return alg.eval_params(state)


def alg_module():
    return LogisticRegression(4, 3).to(torch.float64)


@pytest.fixture
def toy():
    """A toy algorithm registered in one line: FedAvg with half the client step size."""

    @registry.register("toy_half_step")
    def build_toy(module, *, client_lr: float, **fedavg_kwargs):
        return build_fedavg(module, client_lr=client_lr / 2, **fedavg_kwargs)

    yield build_toy
    del registry.ALGORITHMS["toy_half_step"]


def test_one_line_makes_a_toy_algorithm_available_by_name_and_runnable_in_fedpals(toy):
    assert "toy_half_step" in registry.names()
    spec = registry.get("toy_half_step")
    assert spec.factory is toy and spec.hparams == {"client_lr": float}
    with pytest.raises(ValueError, match="'client_lr' = 'fast' is not of type float"):
        spec.build(alg_module(), client_lr="fast")
    # FedPALS's experiment builder takes any registered name that is not one of its own λ kinds
    resolved = {"kind": "toy_half_step", "variant": None, "options": {},
                "train": {"clients_per_round": 3, "local_epochs": 2, "batch_size": 4, "client_lr": 0.2,
                          "server_lr": 1.0}}
    alg, info = fedpals.build_run_algorithm(resolved, alg_module(), {}, num_clients=3)
    expected = build_fedavg(alg_module(), clients_per_round=3, local_epochs=2, batch_size=4, client_lr=0.1)
    assert info == {}
    for k, v in final(expected).items():
        torch.testing.assert_close(final(alg)[k], v, rtol=0, atol=0)


def test_fedpals_builds_through_the_registry_exactly_as_the_factories():
    train = {"clients_per_round": 2, "local_epochs": 1, "batch_size": 5, "client_lr": 0.1, "server_lr": 1.0}
    common = {k: train[k] for k in ("clients_per_round", "local_epochs", "batch_size", "client_lr")}
    cases = {"fedavg": ({}, build_fedavg(alg_module(), server_lr=1.0, **common)),
             "oracle": ({}, build_fedavg(alg_module(), server_lr=1.0, name="oracle", **common)),
             "fedprox": ({"mu": 0.5}, build_fedprox(alg_module(), mu=0.5, server_lr=1.0, **common)),
             "scaffold": ({}, build_scaffold(alg_module(), num_clients=3, server_lr=1.0, **common))}
    for kind, (options, direct) in cases.items():
        resolved = {"kind": kind, "variant": None, "options": options, "train": train}
        alg, _ = fedpals.build_run_algorithm(resolved, alg_module(), {}, num_clients=3)
        assert alg.name == direct.name
        got, want = final(alg), final(direct)
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)


def test_build_refuses_unknown_fixed_and_mistyped_hyper_parameters():
    wafl_spec = registry.get("fedpgm")
    assert wafl_spec.fixed == {"kind": "fedpgm"} and "kind" not in wafl_spec.hparams
    with pytest.raises(ValueError, match="'kind' is fixed"):
        wafl_spec.build(alg_module(), kind="wafl")
    with pytest.raises(ValueError, match="unknown hyper-parameter 'num_clientz'"):
        registry.get("scaffold").build(alg_module(), num_clientz=3)
    with pytest.raises(ValueError, match="is not of type int"):
        registry.get("scaffold").build(alg_module(), clients_per_round=True)
    with pytest.raises(KeyError, match="unknown algorithm 'fedsgd'"):
        registry.get("fedsgd")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("fedavg")(lambda module: None)
    with pytest.raises(ValueError, match="lower-case identifier"):
        registry.register("../fedavg")


def test_build_takes_data_derived_arguments_from_the_context_and_config_keys_from_hparams():
    common = {"clients_per_round": 2, "local_epochs": 1, "batch_size": 5, "client_lr": 0.1}
    # SCAFFOLD's num_clients is data: it comes from the context, and the result equals the direct factory call
    alg = registry.build("scaffold", registry.BuildContext(alg_module(), num_clients=3), **common)
    direct = build_scaffold(alg_module(), num_clients=3, **common)
    got, want = final(alg), final(direct)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)
    assert "num_clients" not in registry.get("scaffold").hparams  # not a config key, so not in its schema
    # a config may not set a data-derived key; a factory's required context field must be given
    with pytest.raises(ValueError, match="num_clients come.*from the data"):
        registry.build("scaffold", registry.BuildContext(alg_module(), num_clients=3), num_clients=4, **common)
    with pytest.raises(ValueError, match="needs num_clients, which the build context does not give"):
        registry.build("scaffold", registry.BuildContext(alg_module()), **common)
    # context fields a factory does not name are not passed (FedAvg has no num_clients)
    fedavg = registry.build("fedavg", registry.BuildContext(alg_module(), num_clients=3), **common)
    assert fedavg.name == "fedavg"


def test_every_algorithm_a_paper_accepts_is_registered():
    names = set(registry.names())
    kinds = {fedpals.registered_algorithm(k) for k in ("fedpals", "fedavg", "fedprox", "scaffold", "oracle",
                                                          "fedprox_fedpals")}
    kinds |= {wafl.registered_algorithm(k) for k in ("fedavg", "wafl", "fedpgm", "fedfgsm")}
    kinds |= set(fedmm.OPTIMIZERS)
    kinds |= {agnostic_fedavg.fit.registered_algorithm(k) for k in ("fedavg", "agnostic_fedavg")}
    kinds |= {"afl"}
    # the benchmark's methods that no reproduced paper runs: rows of the shift matrix only (issue 36)
    kinds |= {"fedadam", "fedyogi", "fedadagrad", "qffl", "fednova", "feddyn", "drfa", "fedlc",
              "fedbn", "fedsr"}
    assert kinds <= names
    assert names - kinds == set()  # and no registered algorithm is left unused


def test_wafl_and_afl_build_through_the_registry_exactly_as_the_factories():
    from fedshift.algorithms.afl import build_stochastic_afl
    from fedshift.algorithms.wafl import build_robust_fedavg

    common = {"clients_per_round": 2, "local_epochs": 1, "batch_size": 5, "client_lr": 0.1, "path": "sequential"}
    for kind, extra in (("fedavg", {}), ("fedfgsm", {"eps": 0.1}), ("wafl", {"gamma": 1.0, "inner_lr": 0.1,
                                                                            "inner_steps": 2})):
        via = registry.get(wafl.registered_algorithm(kind)).build(alg_module(), **common, **extra)
        direct = build_robust_fedavg(alg_module(), kind=kind, **common, **extra)
        got, want = final(via), final(direct)
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)
    hp = {"num_domains": 3, "domain_sizes": [10, 14, 8], "batch_size": 4, "client_lr": 0.05, "lambda_lr": 0.01}
    via, direct = registry.get("afl").build(alg_module(), **hp), build_stochastic_afl(alg_module(), **hp)
    params = init_params(alg_module(), 0, dtype=torch.float64)
    s1, s2 = via.init(params), direct.init(params)
    for r in range(3):
        s1, _ = via.apply(s1, clients(), RoundKey(3, r))
        s2, _ = direct.apply(s2, clients(), RoundKey(3, r))
    for k, v in direct.eval_params(s2).items():
        torch.testing.assert_close(via.eval_params(s1)[k], v, rtol=0, atol=0)


def test_a_registered_toy_is_accepted_by_fedpals_config_and_an_unregistered_name_is_not(toy):
    from test_config_validation import ROOT, base

    from fedshift.errors import ConfigError
    from fedshift.validation import validate_workflow_config

    cfg = copy.deepcopy(base("quick"))
    exp = cfg["fedpals"]["experiments"]["fedpals_fmnist_c3"]
    exp["algorithms"]["toy_half_step"] = {}
    validate_workflow_config(cfg, ROOT / "workflow" / "schemas")
    resolved = fedpals.resolve_run(cfg["fedpals"], "fedpals_fmnist_c3", "toy_half_step")
    assert "toy_half_step" in fedpals.algorithm_ids(exp) and resolved["kind"] == "toy_half_step"
    exp["algorithms"]["fedsgd"] = {}
    with pytest.raises(ConfigError, match=r"c3\.algorithms\.fedsgd: algorithm 'fedsgd' is not registered"):
        validate_workflow_config(cfg, ROOT / "workflow" / "schemas")


UNIFORM = "tests/toy_algorithm/uniform_fedavg.py"


@pytest.fixture
def plugin():
    """The test folder's plug-in algorithm, loaded the way the workflow loads ``algorithm_plugins``."""
    import sys
    from pathlib import Path

    from fedshift import plugins

    target = str(Path(__file__).parents[2] / UNIFORM)
    yield registry.load_plugins([target])
    assert plugins.unload(target, registry.ALGORITHMS) == ("uniform_fedavg",)
    assert not any(m.startswith("fedshift_algorithm_plugin_uniform_fedavg") for m in sys.modules)


def test_a_plugin_file_registers_its_algorithm_and_weights_clients_equally(plugin):
    assert list(plugin.values()) == [("uniform_fedavg",)]
    assert registry.plugin_file("uniform_fedavg").name == "uniform_fedavg.py"
    assert registry.plugin_file("fedavg") is None
    common = {"clients_per_round": 3, "local_epochs": 1, "batch_size": 4, "client_lr": 0.1}
    uniform = registry.get("uniform_fedavg").build(alg_module(), **common)
    # one round from w0: the new model is the equal-weight mean of the three local models (sizes 10, 14, 8);
    # client i's local model is FedAvg's round with one-hot weights e_i
    w0 = init_params(alg_module(), 0, dtype=torch.float64)
    key = RoundKey(7, 0)
    locals_ = []
    for i in range(3):
        one_hot = build_fedavg(alg_module(), **common, client_weights=lambda ids, n, i=i: [float(j == i) for j in ids])
        locals_.append(one_hot.apply(one_hot.init(w0), clients(), key)[0].params)
    state, diag = uniform.apply(uniform.init(w0), clients(), key)
    torch.testing.assert_close(diag["weights"], torch.full((3,), 1 / 3, dtype=torch.float64), rtol=0, atol=1e-15)
    for k in w0:
        torch.testing.assert_close(state.params[k], sum(m[k] for m in locals_) / 3, rtol=0, atol=1e-14)
    nk = build_fedavg(alg_module(), **common)
    by_size, _ = nk.apply(nk.init(w0), clients(), key)
    assert not all(torch.allclose(state.params[k], by_size.params[k]) for k in w0)  # unequal n_i: not FedAvg


def test_bad_algorithm_plugins_name_their_key_path(tmp_path):
    from fedshift.errors import ConfigError

    with pytest.raises(ConfigError, match=r"algorithm_plugins\[0\]: no file"):
        registry.load_plugins([str(tmp_path / "missing.py")])
    (tmp_path / "empty.py").write_text("X = 1\n")
    with pytest.raises(ConfigError, match=r"algorithm_plugins\[0\]: .* registers no algorithm"):
        registry.load_plugins([str(tmp_path / "empty.py")])
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(ConfigError, match=r"algorithm_plugins\[0\]: cannot import .*ModuleNotFoundError"):
        registry.load_plugins([str(tmp_path / "broken.py")])
    with pytest.raises(ConfigError, match="algorithm_plugins: expected a list"):
        registry.load_plugins("uniform_fedavg.py")


# --- the declaration shape: ranges, loop, model parts, read without importing ---------------------------------------

def test_interval_parses_contains_and_writes_schema():
    rng = registry.Interval.parse("[0, 1)")
    assert 0 in rng and 0.5 in rng and 1 not in rng and -1e-9 not in rng and True not in rng and "0" not in rng
    assert rng.schema() == {"minimum": 0.0, "exclusiveMaximum": 1.0} and str(rng) == "[0, 1)"
    assert registry.Interval.parse("(0, inf)").schema() == {"exclusiveMinimum": 0.0}
    assert 1e300 in registry.Interval.parse("(0, inf)") and 0 not in registry.Interval.parse("(0, inf)")
    for bad in ("0, 1", "[1, 0]", "[0, inf]", "[a, 1)", "[0; 1)", 3):
        with pytest.raises(ValueError, match="interval"):
            registry.Interval.parse(bad)


def test_declared_bounds_refuse_out_of_range_values_at_build():
    @registry.register("toy_bounded", bounds={"client_lr": "(0, 1]"}, loop="round", model_parts=("features",))
    def build_toy(module, *, client_lr: float, **fedavg_kwargs):
        return build_fedavg(module, client_lr=client_lr, **fedavg_kwargs)

    try:
        spec = registry.get("toy_bounded")
        assert spec.bounds == {"client_lr": registry.Interval.parse("(0, 1]")}
        assert spec.loop == "round" and spec.model_parts == frozenset({"features"}) and spec.cell is None
        with pytest.raises(ValueError, match=r"'client_lr' = 0 is outside its range \(0, 1\]"):
            spec.build(alg_module(), client_lr=0, clients_per_round=1, local_epochs=1, batch_size=1)
        spec.build(alg_module(), client_lr=1, clients_per_round=1, local_epochs=1, batch_size=1)
    finally:
        del registry.ALGORITHMS["toy_bounded"]


@pytest.mark.parametrize("kwargs, match", [
    ({"needs": ("labels_of_target",)}, "side-information"),
    ({"loop": "mine"}, "loop must be one of"),
    ({"model_parts": ("encoder",)}, "model_parts"),
    ({"cell": "no_colon"}, "cell must be 'module:function'"),
    ({"bounds": {"client_lr": "[1, 0]"}}, r"bounds\['client_lr'\]"),
])
def test_malformed_declarations_are_refused_at_registration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        registry.register("toy_malformed", **kwargs)
    assert "toy_malformed" not in registry.ALGORITHMS


def test_a_bound_on_a_keyword_the_factory_does_not_take_is_refused():
    with pytest.raises(ValueError, match=r"bounds on \['mu'\], which the factory does not take"):
        @registry.register("toy_unknown_bound", bounds={"mu": "[0, 1]"})
        def build(module, *, client_lr: float):
            return None
    assert "toy_unknown_bound" not in registry.ALGORITHMS


def test_static_declarations_equal_the_imported_specs_for_every_algorithm():
    static = registry.declarations()
    assert set(static) == {n for n in registry.names() if registry.get(n).module.startswith("fedshift.")}
    for name, decl in static.items():
        spec = registry.get(name)
        assert (decl.module, decl.factory, dict(decl.fixed), decl.needs, dict(decl.bounds), decl.loop,
                decl.model_parts, decl.cell) == (spec.module, spec.factory.__name__, dict(spec.fixed), spec.needs,
                                                 dict(spec.bounds), spec.loop, spec.model_parts, spec.cell), name


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToySettings(declarations.ClientRound):
    """A toy's settings: the common round and one knob of its own, with its range."""

    beta: Annotated[float, declarations.UNIT] = 0.5


TOY = declarations.AlgorithmDeclaration("toy_declared", __name__, "build_toy", ToySettings)


def test_a_declared_factory_gets_its_settings_fields_and_ranges_and_checks_them_on_a_direct_call():
    @registry.register(TOY)
    def build_toy(module, *, clients_per_round: int, local_epochs: int, batch_size: int, client_lr: float,
                  beta: float = 0.5):
        return beta

    try:
        spec = registry.get("toy_declared")
        assert list(spec.hparams) == ["clients_per_round", "local_epochs", "batch_size", "client_lr", "beta"]
        assert {k: str(v) for k, v in spec.bounds.items()} == {"clients_per_round": "[1, inf)",
                                                                "local_epochs": "[1, inf)", "batch_size": "[1, inf)",
                                                                "client_lr": "(0, inf)", "beta": "[0, 1)"}
        round_ = {"clients_per_round": 1, "local_epochs": 1, "batch_size": 1, "client_lr": 0.1}
        assert build_toy(None, **round_, beta=0.25) == 0.25
        with pytest.raises(ValueError, match=r"algorithm 'toy_declared': hyper-parameter 'beta' = 1 is outside"):
            build_toy(None, **round_, beta=1)  # a direct call meets the declared range
        with pytest.raises(ValueError, match=r"'client_lr' = 0 is outside its range \(0, inf\)"):
            build_toy(None, **{**round_, "client_lr": 0})
        with pytest.raises(ValueError, match="unknown hyper-parameter 'gamma'"):
            spec.build(None, **round_, gamma=1.0)
    finally:
        del registry.ALGORITHMS["toy_declared"]


@pytest.mark.parametrize("signature, match", [
    ("beta: float = 0.5, gamma: float = 1.0", r"the factory takes \['gamma'\], which the settings do not declare"),
    ("", r"the settings declare \['beta'\], which the factory does not take"),
    ("beta: int = 0", r"'beta' is <class 'int'> in the factory but <class 'float'> in the settings"),
    ("beta: float = 0.25", r"'beta' defaults to 0.25 in the factory but 0.5 in the settings"),
])
def test_a_factory_that_disagrees_with_its_declaration_is_refused_at_registration(signature, match):
    namespace = {}
    exec(f"def build_toy(module, *, clients_per_round: int, local_epochs: int, batch_size: int, client_lr: float"
         f"{', ' + signature if signature else ''}):\n    return None\n", namespace)
    factory = namespace["build_toy"]
    factory.__module__ = __name__
    with pytest.raises(ValueError, match="algorithm 'toy_declared': factory .*build_toy and settings .*ToySettings: "
                                         + match):
        registry.register(TOY)(factory)
    assert "toy_declared" not in registry.ALGORITHMS


def test_a_declaration_takes_nothing_else_on_its_register_line():
    with pytest.raises(ValueError, match="its register line takes nothing else"):
        registry.register(TOY, needs=("domain_ids",))

def test_every_declared_cell_hook_reads_exactly_the_keys_its_declaration_names():
    from fedshift.papers.shift_matrix import rows

    hooks = 0
    for name, decl in registry.declarations().items():
        if decl.cell is None:
            assert not decl.cell_keys and not decl.cell_supplies, name
            continue
        hooks += 1
        keys = {k: p.annotation for k, p in rows.hook_keys(name).items()}  # the imported hook's keyword-only params
        assert keys == dict(decl.cell_keys), name
        assert not hasattr(rows.hook(name), "supplies"), name  # declared once, in the declaration
    assert hooks == 8
