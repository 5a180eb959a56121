"""Issue 49 (reliability of what was added last): a malformed-config suite over the sections added since issue 39.

Every case is one mistake a new user makes in the ten new methods' knobs (``shift_matrix.grids`` / ``fixed``), the
``generalization`` and ``feature`` shifts, the three plug-in lists, ``claims`` and YAML itself, and each must be
refused before any job naming the key path (a config case), or the file, line and key (a YAML case), or the config
key and the plug-in's file (a plug-in case). :func:`outcome` sorts a case into the issue's four classes (refused
naming it / refused without naming it / traceback / accepted); run this file as a script for the counts::

    .venv/bin/python tests/unit/test_reliability_issue49.py          # counts of this tree
    PYTHONPATH=<other tree>/src .venv/bin/python tests/unit/test_reliability_issue49.py   # of another tree

It only needs the validation entry points that exist since issue 39 (``validate_workflow_config``,
``check_yaml_file``, the registries' ``load_plugins``), so the same suite counts an older tree.
"""

from __future__ import annotations

import copy
import itertools
import math
import sys
import typing
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_config_validation import edited  # noqa: E402

from fedshift.validation import check_yaml_file, validate_workflow_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "workflow" / "schemas"
SM = ("shift_matrix",)
G = ("shift_matrix", "shifts", "generalization_mnist_m")
F = ("shift_matrix", "shifts", "feature_rotation")
GR = ("shift_matrix", "grids")
FX = ("shift_matrix", "fixed")
C0 = ("claims", "afl", 0)


def _grid(alg, *values):
    """A grid of the matrix's size (``shift_matrix.grid_size``): the given values, padded with the last one."""
    size = yaml.safe_load((ROOT / "config" / "papers" / "shift_matrix.yaml").read_text())["shift_matrix"]["grid_size"]
    vals = list(values) + [values[-1]] * (size - len(values))
    return (*GR, alg), vals


# --- config cases: (id, key path edited, new value, key path the refusal must name) --------------------------------
CONFIG = [
    # knob ranges, declared once on each @register line (issue: "not checked until the job's factory runs")
    ("qffl q 1e9", *_grid("qffl", {"q": 1e9}, {"q": 1.0}), "shift_matrix.grids.qffl[0].q"),
    ("qffl q < 0", *_grid("qffl", {"q": -1.0}, {"q": 1.0}), "shift_matrix.grids.qffl[0].q"),
    ("feddyn alpha 0", *_grid("feddyn", {"alpha": 0}, {"alpha": 0.1}), "shift_matrix.grids.feddyn[0].alpha"),
    ("fedadam beta1 1", *_grid("fedadam", {"server_lr": 0.01, "beta1": 1.0}, {"server_lr": 0.03}),
     "shift_matrix.grids.fedadam[0].beta1"),
    ("fedadam beta2 1.5", *_grid("fedadam", {"server_lr": 0.01, "beta2": 1.5}, {"server_lr": 0.03}),
     "shift_matrix.grids.fedadam[0].beta2"),
    ("fedadam tau 0", (*FX, "fedadam"), {"tau": 0}, "shift_matrix.fixed.fedadam.tau"),
    ("fedyogi beta2 1", (*FX, "fedyogi"), {"beta2": 1.0}, "shift_matrix.fixed.fedyogi.beta2"),
    ("fedadagrad server_lr 0", *_grid("fedadagrad", {"server_lr": 0}, {"server_lr": 0.1}),
     "shift_matrix.grids.fedadagrad[0].server_lr"),
    ("fednova server_lr 0", (*FX, "fednova"), {"server_lr": 0}, "shift_matrix.fixed.fednova.server_lr"),
    ("fednova eta*mu = 1", (*FX, "fednova"), {"prox_mu": 20.0}, "shift_matrix.fixed.fednova.prox_mu"),
    ("fednova eta*mu > 1", (*FX, "fednova"), {"prox_mu": 7.0}, "shift_matrix.fixed.fednova.prox_mu"),
    ("drfa lambda_lr < 0", *_grid("drfa", {"lambda_lr": -0.1}, {"lambda_lr": 0.003}),
     "shift_matrix.grids.drfa[0].lambda_lr"),
    ("drfa local_steps 0", (*FX, "drfa"), {"local_steps": 0}, "shift_matrix.fixed.drfa.local_steps"),
    ("fedsr z_dim 0", (*FX, "fedsr"), {"z_dim": 0}, "shift_matrix.fixed.fedsr.z_dim"),
    ("fedsr z_dim 1e9", (*FX, "fedsr"), {"z_dim": 10**9}, "shift_matrix.fixed.fedsr.z_dim"),
    ("fedsr grid without cmi", *_grid("fedsr", {"l2r": 0.01}, {"l2r": 0.1, "cmi": 0.005}),
     "shift_matrix.grids.fedsr[0]"),
    ("fedsr l2r < 0", *_grid("fedsr", {"l2r": -0.01, "cmi": 0.0005}, {"l2r": 0.1, "cmi": 0.005}),
     "shift_matrix.grids.fedsr[0].l2r"),
    ("fedadam unknown fixed key", (*FX, "fedadam"), {"betaa": 0.9}, "shift_matrix.fixed.fedadam.betaa"),
    ("fedlc tau < 0", *_grid("fedlc", {"tau": -0.1}, {"tau": 1.0}), "shift_matrix.grids.fedlc[0].tau"),
    ("scaffold server_lr 0", (*FX, "scaffold"), {"server_lr": 0.0}, "shift_matrix.fixed.scaffold.server_lr"),
    ("fedbn client_lr 0", *_grid("fedbn", {"client_lr": 0.0}, {"client_lr": 0.1}),
     "shift_matrix.grids.fedbn[0].client_lr"),
    ("fedpgm step 0", (*FX, "fedpgm"), {"step": 0.0, "steps": 5}, "shift_matrix.fixed.fedpgm.step"),
    ("fedpgm steps 0", (*FX, "fedpgm"), {"step": 0.02, "steps": 0}, "shift_matrix.fixed.fedpgm.steps"),
    ("wafl inner_lr 0", (*FX, "wafl"), {"inner_lr": 0.0, "inner_steps": 5, "step_rule": "stable"},
     "shift_matrix.fixed.wafl.inner_lr"),
    ("fedmm mu 0", *_grid("fedmm", {"mu": [0.0, 0.2]}, {"mu": [2.0, 2.0]}), "shift_matrix.grids.fedmm[0].mu[0]"),
    ("fedmm eta3_decay < 1", (*FX, "fedmm"), {"nu": 1.0, "eta3": 1.0, "eta3_decay": 0.5, "eta3_every": 100},
     "shift_matrix.fixed.fedmm.eta3_decay"),
    ("fedprox_sgda mu 0", *_grid("fedprox_sgda", {"mu": 0.0}, {"mu": 2.0}), "shift_matrix.grids.fedprox_sgda[0].mu"),
    ("fedsgda local_steps 5", (*FX, "fedsgda"), {"local_steps": 5}, "shift_matrix.fixed.fedsgda.local_steps"),
    ("agnostic_fedavg window 0", (*FX, "agnostic_fedavg"), {"window_size": 0},
     "shift_matrix.fixed.agnostic_fedavg.window_size"),
    ("afl gamma < 0", (*FX, "afl"), {"w_gradient": "perdomain", "lambda_gradient": "perdomain", "gamma": -1.0},
     "shift_matrix.fixed.afl.gamma"),
    ("fedprox mu < 0", *_grid("fedprox", {"mu": -0.01}, {"mu": 0.1}), "shift_matrix.grids.fedprox[0].mu"),
    # the generalization shift's protocol
    ("generalization target is a source", (*G, "target"), "usps", "shift_matrix.shifts.generalization_mnist_m.target"),
    ("generalization source twice", (*G, "sources"), ["mnist", "mnist"],
     "shift_matrix.shifts.generalization_mnist_m.sources[1]"),
    ("generalization short clients_per_source", (*G, "clients_per_source"), [10],
     "shift_matrix.shifts.generalization_mnist_m.clients_per_source"),
    ("generalization test_size > split", (*G, "test_size"), 9002,
     "shift_matrix.shifts.generalization_mnist_m.test_size"),
    ("generalization rows > usps train", (*G, "clients_per_source"), [10, 20],
     "shift_matrix.shifts.generalization_mnist_m.clients_per_source[1]"),
    # the feature shift's protocol
    ("feature validation = test angle", (*F, "validation_angle"), -60,
     "shift_matrix.shifts.feature_rotation.validation_angle"),
    ("feature validation angle seen", (*F, "validation_angle"), 20,
     "shift_matrix.shifts.feature_rotation.validation_angle"),
    ("feature test angle seen mod 360", (*F, "test_angle"), 350, "shift_matrix.shifts.feature_rotation.test_angle"),
    ("feature max_angle 180", (*F, "max_angle"), 180, "shift_matrix.shifts.feature_rotation.max_angle"),
    ("feature test rows > split", (*F, "test_size"), 9000, "shift_matrix.shifts.feature_rotation.test_size"),
    ("feature train rows > split", (*F, "samples_per_client"), 3000, "shift_matrix.shifts.feature_rotation.clients"),
    # the other kinds' protocols: rows within the data registry's splits
    ("label rows > split", (*SM, "shifts", "label", "samples_per_label"), 1000,
     "shift_matrix.shifts.label.samples_per_label"),
    ("adversarial rows > split", (*SM, "shifts", "adversarial", "train_per_client"), 3000,
     "shift_matrix.shifts.adversarial.clients"),
    ("none test rows > split", (*SM, "shifts", "none_iid", "test_size"), 10001,
     "shift_matrix.shifts.none_iid.test_size"),
    ("mixture usps rows > split", (*SM, "shifts", "mixture", "clients_per_domain"), [12, 40, 4],
     "shift_matrix.shifts.mixture.clients_per_domain[1]"),
    ("domain target is the source", (*SM, "shifts", "domain_mnist_m", "target"), "mnist",
     "shift_matrix.shifts.domain_mnist_m.target"),
    # claims
    ("claim reads a table no rule writes", (*C0, "quantity", "table"), "results/tables/afl/table9.csv",
     "claims.afl[0].quantity.table"),
]

# --- YAML cases: (id, file name, bytes, what the refusal must name besides the file) --------------------------------
YAML = [
    ("duplicate top-level key", "dup.yaml", b"scale: quick\nseeds: 2\nscale: paper\n", ["line 3", "'scale'"]),
    ("duplicate nested key", "dup_nested.yaml", b"shift_matrix:\n  train:\n    rounds: 5\n    rounds: 6\n",
     ["line 4", "'rounds'"]),
    ("duplicate key in a flow mapping", "dup_flow.yaml", b"shift_matrix: {seeds: 3, seeds: 4}\n",
     ["line 1", "'seeds'"]),
    ("duplicate key in a JSON overlay", "dup.json", b'{"scale": "quick", "scale": "paper"}\n', ["line 1", "'scale'"]),
    ("duplicate key in nested JSON", "dup_nested.json", b'{"shift_matrix": {"seeds": 3,\n "seeds": 5}}\n',
     ["line 2", "'seeds'"]),
    ("empty file", "empty.yaml", b"", ["no keys"]),
    ("comments only", "comments.yaml", b"# scale: quick\n# nothing else\n", ["no keys"]),
    ("empty mapping", "braces.yaml", b"{}\n", ["no keys"]),
    ("a list", "list.yaml", b"- scale: quick\n", ["list"]),
    ("a scalar", "scalar.yaml", b"quick\n", ["str"]),
    ("a number", "number.yaml", b"3\n", ["int"]),
    ("binary bytes", "binary.yaml", bytes(range(128, 256)), ["not UTF-8"]),
    ("UTF-16 text", "utf16.yaml", "scale: quick\n".encode("utf-16"), ["not UTF-8"]),
]

# --- plug-in cases: (id, config list, file text, what the refusal must name besides the key and the file) ----------
PLUGIN = [
    ("algorithm plug-in exits 0", "algorithm_plugins", "import sys\nsys.exit(0)\n", ["SystemExit"]),
    ("shift plug-in exits 1", "shift_plugins", "raise SystemExit(1)\n", ["SystemExit"]),
    ("algorithm plug-in raises", "algorithm_plugins", "raise RuntimeError('half-way')\n", ["RuntimeError"]),
    ("algorithm plug-in takes fedavg", "algorithm_plugins",
     "from fedshift.algorithms.registry import register\n"
     "@register('fedavg')\ndef build(module, *, client_lr: float):\n    return None\n", ["'fedavg'", "REPLACES"]),
    ("algorithm plug-in takes qffl (not imported yet)", "algorithm_plugins",
     "from fedshift.algorithms.registry import register\n"
     "@register('qffl')\ndef build(module, *, client_lr: float):\n    return None\n", ["'qffl'", "REPLACES"]),
    ("shift plug-in takes the label kind", "shift_plugins",
     "from fedshift.shifts import Shift, register_shift\n"
     "@register_shift\nclass Mine(Shift):\n    kind = 'label'\n", ["'label'", "REPLACES"]),
    ("dataset plug-in without a decoder", "dataset_plugins",
     "from fedshift.data.registry import DatasetFacts, register_dataset\n"
     "register_dataset(DatasetFacts('toy49_nodecoder', 3, (1, 8, 8)))\n", ["'toy49_nodecoder'", "decoder"]),
    ("REPLACES a name nobody registers", "algorithm_plugins",
     "REPLACES = ('fedavgg',)\nfrom fedshift.algorithms.registry import register\n"
     "@register('fedavgg')\ndef build(module, *, client_lr: float):\n    return None\n", ["fedavgg"]),
]


def _loader(key):
    if key == "algorithm_plugins":
        from fedshift.algorithms.registry import ALGORITHMS, load_plugins
        return load_plugins, ALGORITHMS
    if key == "shift_plugins":
        from fedshift.shifts import SHIFTS, load_plugins
        return load_plugins, SHIFTS
    from fedshift.data.registry import FACTS, load_plugins
    return load_plugins, FACTS


def _run(kind, case, tmp):
    """Run one case; returns (raised exception or None, what the refusal must name)."""
    if kind == "config":
        _, path, value, where = case
        try:
            validate_workflow_config(edited(None, path, value), SCHEMAS)
        except BaseException as err:  # noqa: BLE001 — sorted by outcome()
            return err, [f"config error at {where}"]
        return None, []
    if kind == "yaml":
        _, name, data, needs = case
        f = Path(tmp) / name
        f.write_bytes(data)
        try:
            check_yaml_file(f)
        except BaseException as err:  # noqa: BLE001
            return err, [str(f), *needs]
        return None, []
    ident, key, text, needs = case
    f = Path(tmp) / f"plugin_{abs(hash(ident)) % 10**8}.py"
    f.write_text(text)
    load, table = _loader(key)
    try:
        if key == "dataset_plugins":  # the decoder is checked with the rest of the config, before any job
            cfg = copy.deepcopy(edited(None, ("dataset_plugins",), [str(f)]))
            validate_workflow_config(cfg, SCHEMAS)
        else:
            load([str(f)])
    except BaseException as err:  # noqa: BLE001
        return err, [f"config error at {key}[0]", str(f), *needs]
    finally:
        from fedshift import plugins

        plugins.unload(str(f), table)
    return None, []


def outcome(kind, case, tmp):
    """The issue's four classes: "named", "unnamed", "traceback" (or an exit), "accepted"."""
    err, needs = _run(kind, case, tmp)
    if err is None:
        return "accepted"
    if not isinstance(err, ValueError):  # ConfigError is a ValueError; SystemExit and the rest are not refusals
        return "traceback"
    msg = str(err)
    return "named" if all(n in msg for n in needs) else "unnamed"


ALL = [("config", c) for c in CONFIG] + [("yaml", c) for c in YAML] + [("plugin", c) for c in PLUGIN]


@pytest.mark.parametrize(("kind", "case"), ALL, ids=[f"{k}:{c[0]}" for k, c in ALL])
def test_malformed_case_is_refused_naming_where(kind, case, tmp_path):
    err, needs = _run(kind, case, tmp_path)
    assert err is not None, f"accepted: {case[0]}"
    assert isinstance(err, ValueError), repr(err)
    assert all(n in str(err) for n in needs), (needs, str(err))


def test_range_refusals_name_the_allowed_range():
    """A range refusal says what is allowed, not only what is wrong."""
    err, _ = _run("config", CONFIG[0], None)
    assert "allowed range [0, 100]" in str(err), err
    err, _ = _run("config", CONFIG[9], None)  # FedNova η·μ
    assert "[0, 1)" in str(err) and "client_lr = 0.05" in str(err) and "prox_mu = 20.0" in str(err), err


def _bad_values(rng):
    """Values just outside an Interval: below lo and above hi, where the ends are finite."""
    out = []
    if rng.lo != -math.inf:
        out.append(rng.lo - 1 if rng.lo_closed else rng.lo)
    if rng.hi != math.inf:
        out.append(rng.hi + 1 if rng.hi_closed else rng.hi)
    return out


def _walk():
    """(algorithm, key, bad value) for every finite end of every single-knob range every algorithm declares."""
    from fedshift.algorithms import registry

    out = []
    for name in registry.names():
        for key, rng in registry.get(name).bounds.items():
            if "*" not in key:
                out += [(name, key, v) for v in _bad_values(rng)]
    return out


def test_every_registered_algorithm_declares_ranges():
    from fedshift.algorithms import registry

    bare = [n for n in registry.names() if not registry.get(n).bounds]
    assert not bare, f"no bounds= on the @register line of {bare}"


def test_every_declared_range_is_refused_before_any_job_naming_the_key_and_range():
    """Each finite end of each declared range, one value past it, in ``shift_matrix.fixed.<alg>``."""
    from fedshift.algorithms import registry

    walked = _walk()
    assert len({n for n, _, _ in walked}) == len(registry.names())
    for name, key, bad in walked:
        value = int(bad) if registry.get(name).hparams.get(key) is int else bad
        if typing.get_origin(registry.get(name).hparams.get(key)) is tuple:  # FedMM's (μ₁, μ₂)
            value = [value, value]
        with pytest.raises(ValueError) as err:
            validate_workflow_config(edited(None, (*FX, name), {key: value}), SCHEMAS)
        msg = str(err.value)
        assert msg.startswith(f"config error at shift_matrix.fixed.{name}.{key}"), (name, key, value, msg)
        # the range, or the earlier generic check of every step size (validation.STEP_KEYS: "a step size is ≥ 0")
        assert "allowed range" in msg or "a step size is ≥ 0" in msg, (name, key, value, msg)


def test_the_factory_reads_the_same_declaration():
    """Library use: the registry's build refuses the values the schema refuses (one source of truth)."""
    from fedshift.algorithms import registry

    for name, key, bad in _walk():
        errors = registry.range_errors(registry.get(name).bounds, {key: bad})
        assert errors and errors[0][0] == key, (name, key, bad)
    with pytest.raises(ValueError, match=r"client_lr \* prox_mu must be in \[0, 1\)"):
        registry.check_ranges("fednova", {"client_lr": 0.5, "prox_mu": 2.0})


def test_static_declarations_carry_the_same_bounds_as_the_imported_specs():
    from fedshift.algorithms import registry

    decls = registry.declarations()
    for name in registry.names():
        assert decls[name].bounds == registry.get(name).bounds, name


@pytest.mark.parametrize(("path", "value"), [
    ((*G, "test_size"), 9001),                  # exactly the split
    ((*F, "test_angle"), 300),                  # −60° as a direction: unseen, not the validation angle
    ((*FX, "fednova"), {"prox_mu": 0.9}),       # η·μ = 0.9 < 1 with the default grid's largest η = 1.0
    ((*FX, "fedpals"), {"prox_mu": 0.0}),
])
def test_the_protocols_accept_valid_edits(path, value):
    validate_workflow_config(edited(None, path, value), SCHEMAS)


def test_a_declared_replacement_is_accepted_and_the_code_hash_follows_it(tmp_path):
    from fedshift import plugins
    from fedshift.algorithms import registry

    builtin = registry.get("fedlc")
    f = tmp_path / "my_fedlc.py"
    f.write_text("REPLACES = ('fedlc',)\nfrom fedshift.algorithms.registry import register\n"
                 "@register('fedlc', bounds={'tau': '[0, 1]'})\n"
                 "def build_fedlc(module, *, tau: float, client_lr: float):\n    return None\n")
    try:
        assert registry.load_plugins([str(f)]) == {str(f): ("fedlc",)}
        assert registry.get("fedlc") is not builtin and registry.plugin_file("fedlc") == f.resolve()
        assert plugins.REPLACED["fedlc"] == str(f.resolve())
        # the plug-in's own declaration is the schema's: τ ≤ 1 now, where the built-in allowed any τ ≥ 0
        from fedshift.validation import hparam_schema

        assert hparam_schema("fedlc")["properties"]["tau"] == {"type": "number", "minimum": 0.0, "maximum": 1.0}
    finally:
        plugins.unload(str(f), registry.ALGORITHMS)
    assert registry.get("fedlc") is builtin and registry.plugin_file("fedlc") is None


def test_a_failed_plugin_leaves_no_partial_registration(tmp_path):
    from fedshift.algorithms import registry
    from fedshift.errors import ConfigError

    f = tmp_path / "half.py"
    f.write_text("from fedshift.algorithms.registry import register\n"
                 "@register('half49')\ndef build(module, *, client_lr: float):\n    return None\n"
                 "raise RuntimeError('after registering')\n")
    with pytest.raises(ConfigError, match=r"algorithm_plugins\[0\]: cannot import .*half.py.*RuntimeError"):
        registry.load_plugins([str(f)])
    assert "half49" not in registry.ALGORITHMS


def counts() -> dict[str, int]:
    """The suite's outcome counts on the fedshift that is imported (this tree, or PYTHONPATH's)."""
    import tempfile

    out = dict.fromkeys(("named", "unnamed", "traceback", "accepted"), 0)
    with tempfile.TemporaryDirectory() as tmp:
        for (kind, case), i in zip(ALL, itertools.count(), strict=False):
            sub = Path(tmp) / str(i)
            sub.mkdir()
            out[outcome(kind, case, sub)] += 1
    return out


if __name__ == "__main__":
    import fedshift

    print(f"{fedshift.__file__}: {len(ALL)} cases: {counts()}")


@pytest.mark.workflow  # Snakemake parses the workflow (seconds)
def test_snakemake_refuses_a_duplicate_key_in_an_overlay(tmp_path):
    """The Snakefile's pre-check reads every --configfile overlay too: a duplicate key names file, line and key."""
    import os
    import subprocess

    overlay = tmp_path / "dup.yaml"
    overlay.write_text("shift_matrix:\n  seeds: 3\n  seeds: 4\n")
    out = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-n", "--configfile", str(overlay)],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True,
                         text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert f"fedshift: config file {overlay}, line 3 column 3: duplicate key 'seeds'" in text, text[-2000:]
