"""fedshift on CUDA (issue 38): device-agnostic results, no host sync in a batched round, portable checkpoints.

The tests marked ``cuda`` are always collected and skipped where torch sees no CUDA device (``tests/conftest.py``;
``FEDSHIFT_REQUIRE_CUDA=1``, set by ``benchmarks/device_check``, makes that a failure). The others run everywhere:
the CPU-side halves of the same checks (a host-sync detector over the batched round, the checkpoint's device
independence), so the logic is exercised in CI.

Tolerances, stated once:

* ``F64_TOL = 1e-10`` (relative to ``max(1, max|reference|)``): batched vs sequential and CUDA vs CPU in float64,
  where only the order of summation differs;
* ``F32_TOL = 1e-4``, the same in float32 (TF32 turned off: it rounds matmul and convolution inputs to 10 bits);
* quick paper jobs, CUDA vs CPU (the project's float32 jobs, TF32 off): every logged loss-like value within
  ``JOB_RTOL = 1e-3`` relative (+ ``JOB_ATOL = 1e-4``), accuracy-like values within one test example.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.overrides import TorchFunctionMode

from fedshift.algorithms import adversarial as adv
from fedshift.algorithms.agnostic_fedavg import build_agnostic_fedavg
from fedshift.algorithms.agnostic_fedavg_steps import DomainClients
from fedshift.algorithms.fedavg import build_fedavg
from fedshift.algorithms.fedpals import build_fedpals
from fedshift.algorithms.fedprox import build_fedprox
from fedshift.algorithms.scaffold import build_scaffold
from fedshift.algorithms.wafl import build_robust_fedavg
from fedshift.core.base import ClientData
from fedshift.core.engine import ClientPool, FilePool, local_sgd
from fedshift.core.rng import RoundKey
from fedshift.core.training import run_training
from fedshift.models import LogisticRegression, McMahanCNN, init_params

REPO = Path(__file__).resolve().parents[2]
F64_TOL, F32_TOL = 1e-10, 1e-4
JOB_RTOL, JOB_ATOL = 1e-3, 1e-4
cuda = pytest.mark.cuda


@pytest.fixture
def no_tf32():
    """TF32 off for matmuls and cuDNN convolutions during the test (restored after)."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> float:
    """Max |a − b| over max(1, max|b|), asserted ≤ tol; both compared on the CPU in float64."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    err = float((a - b).abs().max()) / max(1.0, float(b.abs().max()))
    assert err <= tol, f"relative error {err:.3g} > {tol:g}"
    return err


def _clients(sizes, d, k, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [ClientData(i, torch.randn(n, d, generator=g, dtype=torch.float64).to(device, dtype),
                       torch.randint(0, k, (n,), generator=g).to(device), 0) for i, n in enumerate(sizes)]


# ---- batched vs sequential, per algorithm family (the engine's local training) --------------------------------------

ENGINE_FAMILIES = ("fedavg-mlr", "fedavg-cnn", "fedprox", "scaffold", "wafl", "fedpgm", "fedfgsm", "fedpals")
SIZES = (9, 6, 11, 8)


def _build(family: str, module, path: str, clients):
    common = dict(clients_per_round=3, local_epochs=2, batch_size=4, client_lr=0.05, path=path)
    if family.startswith("fedavg"):
        return build_fedavg(module, **common)
    if family == "fedprox":
        return build_fedprox(module, mu=0.5, **common)
    if family == "scaffold":
        return build_scaffold(module, num_clients=len(clients), **common)
    if family == "wafl":
        return build_robust_fedavg(module, kind="wafl", gamma=0.5, inner_lr=1.0, inner_steps=3, **common)
    if family == "fedpgm":
        return build_robust_fedavg(module, kind="fedpgm", eps=0.3, step=0.05, steps=3, **common)
    if family == "fedfgsm":
        return build_robust_fedavg(module, kind="fedfgsm", eps=0.3, **common)
    assert family == "fedpals"
    k = 10
    marg = np.stack([np.bincount(c.y.cpu().numpy(), minlength=k) / len(c.y) for c in clients])
    target = np.full(k, 1.0 / k)
    return build_fedpals(module, target_label_marginal=target, client_label_marginals=marg, lam=1.0, **common)


def _train_family(family: str, path: str, dtype, device, rounds=3):
    module = (McMahanCNN(10) if family == "fedavg-cnn" else LogisticRegression(784, 10)).to(device, dtype)
    clients = _clients(SIZES, 784, 10, dtype, device)
    alg = _build(family, module, path, clients)
    p0 = {k: v.to(device) for k, v in init_params(module, 0, dtype=dtype).items()}
    res = run_training(alg, p0, clients, rounds=rounds, seed=3, log_every=rounds)
    return alg.eval_params(res.state), res.history


@cuda
@pytest.mark.parametrize("family", ENGINE_FAMILIES)
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, F64_TOL), (torch.float32, F32_TOL)], ids=["f64", "f32"])
def test_batched_equals_sequential_on_cuda_and_cuda_equals_cpu(family, dtype, tol, no_tf32):
    batched, hist = _train_family(family, "batched", dtype, "cuda")
    sequential, _ = _train_family(family, "sequential", dtype, "cuda")
    on_cpu, _ = _train_family(family, "sequential", dtype, "cpu")
    init = init_params(McMahanCNN(10) if family == "fedavg-cnn" else LogisticRegression(784, 10), 0, dtype=dtype)
    for k in batched:
        assert batched[k].device.type == "cuda" and sequential[k].device.type == "cuda", k
        assert batched[k].dtype == dtype
        _close(batched[k], sequential[k], tol)
        _close(batched[k], on_cpu[k], tol)
    assert max(float((batched[k].cpu() - init[k]).abs().max()) for k in batched) > 1e-3  # it trained
    assert all(math.isfinite(v) for v in hist[-1].values() if isinstance(v, float))


@cuda
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, F64_TOL), (torch.float32, F32_TOL)], ids=["f64", "f32"])
def test_agnostic_fedavg_on_cuda_equals_cpu(dtype, tol, no_tf32):
    # AgnosticFedAvg trains its clients in its own loop (no batched path): the check is CUDA against CPU
    out = {}
    for device in ("cuda", "cpu"):
        g = torch.Generator().manual_seed(0)
        xs = [torch.randn(n, 5, generator=g, dtype=torch.float64).to(device, dtype) for n in (7, 12, 5, 9)]
        ys = [torch.randint(0, 3, (len(x),), generator=g).to(device) for x in xs]
        ds = [(torch.arange(len(x)) % 2).to(device) for x in xs]
        module = LogisticRegression(5, 3).to(device, dtype)
        alg = build_agnostic_fedavg(module, num_domains=2, clients_per_round=3, local_epochs=2, batch_size=4,
                                    client_lr=0.2, lambda_lr=0.1, window_size=1)
        p0 = {k: v.to(device) for k, v in init_params(module, 1, dtype=dtype).items()}
        res = run_training(alg, p0, DomainClients.from_clients(xs, ys, ds, 2), rounds=4, seed=5, log_every=4)
        out[device] = res.state
    for k in out["cpu"].params:
        assert out["cuda"].params[k].device.type == "cuda"
        _close(out["cuda"].params[k], out["cpu"].params[k], tol)
    _close(out["cuda"].lam, out["cpu"].lam, tol)


class _Vectors(torch.utils.data.Dataset):
    """Item ``(row, seed) -> (x, y)``: a 784-vector drawn from ``seed`` plus the label ``row`` mod 10 (CPU tensors)."""

    def __getitem__(self, item):
        row, seed = item
        return torch.randn(784, generator=torch.Generator().manual_seed(seed)) + row % 10, row % 10


@cuda
@pytest.mark.parametrize("workers", [0, 2])
def test_streamed_path_feeds_cuda_through_pinned_batches_and_equals_cpu(workers, no_tf32):
    # the FilePool path (PACS, iWildCam): DataLoader batches pinned and copied without blocking; Adam on the device
    offsets = np.array([0, 23, 40, 71, 90])
    out = {}
    for device in ("cuda", "cpu"):
        module = McMahanCNN(10).to(device)
        w0 = {k: v.to(device) for k, v in init_params(module, 4).items()}
        pool = FilePool(_Vectors(), offsets, torch.device(device), client_optimizer="adam", num_workers=workers)
        out[device] = local_sgd(module, w0, pool, [3, 0, 2], RoundKey(2, 0), epochs=1, batch_size=8, lr=1e-3)
    assert list(out["cuda"].steps) == list(out["cpu"].steps) == [3, 3, 4]
    for k, v in out["cpu"].params.items():
        assert out["cuda"].params[k].device.type == "cuda"
        _close(out["cuda"].params[k], v, F32_TOL)
    _close(out["cuda"].loss, out["cpu"].loss, F32_TOL)


# ---- one quick job per paper and one shift-matrix cell: CUDA vs CPU ---------------------------------------------

PAPERS = ("afl", "agnostic_fedavg", "wafl", "fedmm", "fedpals")


def _final_rows(out: Path) -> dict[str, dict[str, float]]:
    rows = {}
    for h in sorted(out.rglob("history.csv")):
        df = pd.read_csv(h)
        keep = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])
                and not any(t in c.lower() for t in ("time", "second", "elapsed", "wall", "memory", "rss"))]
        rows[str(h.relative_to(out))] = df[keep].iloc[-1].to_dict()
    return rows


@cuda
@pytest.mark.parametrize("paper", PAPERS)
def test_quick_job_of_each_paper_on_cuda_matches_the_cpu_job(paper, tmp_path, no_tf32, monkeypatch):
    sys.path.insert(0, str(REPO / "tests"))
    import paper_jobs

    monkeypatch.setenv("TQDM_DISABLE", "1")
    paper_jobs.setup(paper, tmp_path)
    for dev in ("cpu", "cuda"):
        paper_jobs.run(tmp_path, f"out-{dev}", device=dev)
    cpu, gpu = _final_rows(tmp_path / "out-cpu"), _final_rows(tmp_path / "out-cuda")
    assert cpu and cpu.keys() == gpu.keys()
    for run_json in (tmp_path / "out-cuda").rglob("run.json"):
        assert str(json.loads(run_json.read_text())["environment"]["device"]).startswith("cuda"), run_json
    for name, row in cpu.items():
        for col, want in row.items():
            got = gpu[name][col]
            if isinstance(want, float) and math.isnan(want):
                assert math.isnan(got), (name, col)
            elif "acc" in col.lower() or "f1" in col.lower():  # one example of the smallest test set (8 rows)
                assert abs(got - want) <= 1 / 8 + 1e-9, (name, col, got, want)
            else:
                assert got == pytest.approx(want, rel=JOB_RTOL, abs=JOB_ATOL), (name, col)


@cuda
def test_one_shift_matrix_cell_on_cuda_matches_cpu(no_tf32):
    from fedshift.papers.shift_matrix import cells
    from fedshift.shifts import shift_of

    g = torch.Generator().manual_seed(7)
    data = {"fashion_mnist": {"class_names": [str(k) for k in range(10)]}}
    for split, n in (("train", 1500), ("test", 600)):
        y = torch.arange(n) % 10
        x = torch.randint(0, 60, (n, 28, 28), generator=g, dtype=torch.uint8)
        x.view(n, -1)[torch.arange(n), y * 7] = 255
        data["fashion_mnist"][f"x_{split}"], data["fashion_mnist"][f"y_{split}"] = x, y
    spec = {"kind": "label", "dataset": "fashion_mnist", "clients": 6, "labels_per_client": 3,
            "samples_per_label": 10, "validation_size": 30, "test_size": 200}
    train = {"rounds": 5, "clients_per_round": 3, "local_epochs": 1, "batch_size": 10, "client_lr": 0.1}
    sh = shift_of("label", spec)
    inst = sh.instance(data, 0)
    out = {}
    for dev in ("cpu", "cuda"):  # one value trained to the full budget, as a cell's job trains it (tuning.eta: null)
        tuned = cells.successive_halving("fedavg", inst, 0, model="logreg", train=train, fixed={},
                                         grid=[{"client_lr": 0.1}], device=dev, score=lambda module, params: 0.0,
                                         eta=None)
        out[dev] = (tuned.params[0], tuned.history)
    for k, v in out["cpu"][0].items():
        assert out["cuda"][0][k].device.type == "cuda"
        _close(out["cuda"][0][k], v, F32_TOL)
    assert out["cuda"][1][-1]["loss"] == pytest.approx(out["cpu"][1][-1]["loss"], rel=JOB_RTOL, abs=JOB_ATOL)


# ---- no host synchronisation inside a batched round ----------------------------------------------------------------

def _round_cases(device):
    """(name, local_sgd kwargs) of the batched round with each kind of hook, on ``device`` in float32."""
    mlr, cnn = LogisticRegression(784, 10).to(device), McMahanCNN(10).to(device)
    pool = ClientPool.from_clients(_clients((12, 7, 10, 9), 784, 10, torch.float32, device))
    cases = []
    for name, module in (("mlr", mlr), ("cnn", cnn)):
        w0 = {k: v.to(device) for k, v in init_params(module, 0).items()}
        base = dict(module=module, global_params=w0, pool=pool, client_ids=[2, 0, 3], key=RoundKey(1, 0), epochs=2,
                    batch_size=4, lr=0.05, path="batched")
        control = {k: torch.full((3, *v.shape), 0.01, device=device) for k, v in w0.items()}

        def prox(p, ctx):
            return 0.25 * sum(((p[k] - ctx["shared"]["global"][k]) ** 2).sum() for k in p)

        def correct(gr, ctx):
            return {k: gr[k] - ctx["per_client"]["c"][k] for k in gr}

        def perturb(p, x, y, module=module):
            return adv.wasserstein_ascent(module, p, x, y, gamma=0.5, lr=1.0, steps=2)

        cases += [(f"fedavg-{name}", base),
                  (f"fedprox-{name}", dict(base, regularizer=prox, shared={"global": w0})),
                  (f"scaffold-{name}", dict(base, grad_transform=correct, per_client={"c": control})),
                  (f"wafl-{name}", dict(base, perturb=perturb))]
    return cases


@cuda
def test_batched_round_has_no_host_sync_on_cuda(no_tf32):
    for name, kw in _round_cases("cuda"):
        local_sgd(**kw)  # warm-up: lazy library initialisation may synchronise once
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            res = local_sgd(**kw)
        except RuntimeError as e:
            pytest.fail(f"{name}: the batched round synchronised with the host: {e}")
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert res.loss.device.type == "cuda" and torch.isfinite(res.loss).all(), name


class HostSyncDetector(TorchFunctionMode):
    """Records tensor operations that make the host wait for a GPU (reads of a value into Python, copies to the
    host, data-dependent shapes), whatever the device: the CPU-side stand-in for ``set_sync_debug_mode``."""

    SYNCING = {torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__float__, torch.Tensor.__int__,
               torch.Tensor.__index__, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu,
               torch.Tensor.nonzero, torch.nonzero, torch.masked_select, torch.Tensor.masked_select,
               torch.unique, torch.Tensor.unique, torch.Tensor.__array__}

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.SYNCING:
            self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def test_host_sync_detector_catches_the_usual_syncs():
    t = torch.ones(3)
    with HostSyncDetector() as d:
        bool(t.all()), t.sum().item(), float(t[0]), t.tolist(), t.nonzero()  # noqa: B018
    assert set(d.calls) >= {"__bool__", "item", "__float__", "tolist", "nonzero"}
    with HostSyncDetector() as d:
        (t * 2 + 1).sum()
    assert d.calls == []


@pytest.mark.parametrize("case", range(8))
def test_batched_round_reads_no_value_back_on_the_cpu(case):
    # the CPU half of the CUDA test above: every hook kind, MLR (hand-batched kernel) and CNN (vmap)
    name, kw = _round_cases("cpu")[case]
    with HostSyncDetector() as d:
        res = local_sgd(**kw)
    assert d.calls == [], f"{name}: host syncs {d.calls}"
    assert torch.isfinite(res.loss).all()


# ---- checkpoints across devices -------------------------------------------------------------------------------------

def _fedavg_run(device, ckpt: Path | None, stop_after=None):
    module = LogisticRegression(784, 10).to(device, torch.float64)
    clients = _clients(SIZES, 784, 10, torch.float64, device)
    alg = build_fedavg(module, clients_per_round=3, local_epochs=1, batch_size=4, client_lr=0.05, path="batched",
                       server_optimizer="adam", server_lr=0.01)
    p0 = {k: v.to(device) for k, v in init_params(module, 0, dtype=torch.float64).items()}
    return run_training(alg, p0, clients, rounds=4, seed=2, log_every=2, checkpoint_every=2 if ckpt else 0,
                        checkpoint_path=ckpt, stop_after=stop_after, fingerprint="xdev")


def _resume_across(first: str, second: str, tmp_path: Path):
    want = _fedavg_run("cpu", None).state
    ckpt = tmp_path / "ckpt.pt"
    half = _fedavg_run(first, ckpt, stop_after=2)
    assert ckpt.exists() and len(half.history) == 1
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert int(saved["round"]) == 2
    got = _fedavg_run(second, ckpt).state
    assert got.round == want.round == 4
    for k in want.params:
        assert got.params[k].device.type == second, k
        _close(got.params[k], want.params[k], F64_TOL)
    # the server optimiser's state came across too (Adam's moments live on the resumed device)
    for leaf in torch.utils._pytree.tree_leaves(got.opt_state):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            assert leaf.device.type == second


def test_checkpoint_resume_on_the_cpu_is_exact(tmp_path):
    _resume_across("cpu", "cpu", tmp_path)


@cuda
@pytest.mark.parametrize(("first", "second"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_checkpoint_written_on_one_device_resumes_on_the_other(first, second, tmp_path):
    _resume_across(first, second, tmp_path)


# ---- reproducibility switch, pick_device, two jobs on one GPU -------------------------------------------------------

_JOB = textwrap.dedent("""
    import hashlib, sys, warnings
    warnings.simplefilter("always")
    caught = []
    warnings.showwarning = lambda m, *a, **k: caught.append(str(m))
    import torch
    from fedshift.provenance import pick_device
    from fedshift.algorithms.fedavg import build_fedavg
    from fedshift.algorithms.wafl import build_robust_fedavg
    from fedshift.core.base import ClientData
    from fedshift.models import McMahanCNN, init_params
    from fedshift.core.training import run_training
    dev, scale = pick_device(sys.argv[1]), float(sys.argv[2])
    g = torch.Generator().manual_seed(0)
    sizes = [int(scale * n) for n in (40, 33, 52, 47)]
    clients = [ClientData(i, torch.randn(n, 784, generator=g).to(dev), torch.randint(0, 10, (n,), generator=g).to(dev),
                          0) for i, n in enumerate(sizes)]
    h = hashlib.sha256()
    module = McMahanCNN(10).to(dev)
    for alg in (build_fedavg(module, clients_per_round=3, local_epochs=1, batch_size=8, client_lr=0.05, path="batched"),
                build_robust_fedavg(module, kind="wafl", gamma=0.5, inner_lr=1.0, inner_steps=2, clients_per_round=3,
                                    local_epochs=1, batch_size=8, client_lr=0.05, path="batched")):
        p0 = {k: v.to(dev) for k, v in init_params(module, 0).items()}
        res = run_training(alg, p0, clients, rounds=3, seed=1, log_every=3)
        for k, v in sorted(alg.eval_params(res.state).items()):
            h.update(v.detach().cpu().numpy().tobytes())
    print("RESULT", dev, torch.are_deterministic_algorithms_enabled(), h.hexdigest())
    for w in sorted(set(caught)):
        print("WARNING", w.replace(chr(10), " ")[:300])
""")


def _job(device: str, env: dict[str, str], scale: float = 1.0) -> subprocess.Popen:
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
            "TQDM_DISABLE": "1"}
    return subprocess.Popen([sys.executable, "-c", _JOB, device, str(scale)], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> tuple[str, bool, str, list[str]]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT")]
    _, dev, det, digest = line.split()
    return dev, det == "True", digest, [ln for ln in out.splitlines() if ln.startswith("WARNING")]


def _portable_env() -> dict[str, str]:
    from fedshift.provenance import PORTABLE_CPU_ENV

    return dict(PORTABLE_CPU_ENV)


def test_reproducibility_switch_gives_the_same_bytes_twice_on_the_cpu():
    a, b = (_result(_job("cpu", _portable_env(), scale=0.2)) for _ in range(2))  # the portable kernels are slow
    assert a[1] and b[1], "the switch did not turn deterministic algorithms on"
    assert a[2] == b[2]


@cuda
def test_reproducibility_switch_gives_the_same_bytes_twice_on_one_gpu():
    a, b = (_result(_job("cuda", _portable_env())) for _ in range(2))
    assert a[0].startswith("cuda") and a[1] and b[1]
    nondeterministic = [w for w in a[3] + b[3] if "deterministic" in w.lower()]
    assert a[2] == b[2], f"two runs on one GPU differ; kernels without a deterministic version: {nondeterministic}"


@cuda
def test_pick_device_and_two_jobs_sharing_one_gpu():
    from fedshift.provenance import pick_device

    assert pick_device("auto").type == "cuda"
    dev = pick_device("cuda")
    assert dev.type == "cuda" and dev.index < torch.cuda.device_count()
    assert pick_device("cpu").type == "cpu"
    # `snakemake --resources gpu=2` on a one-GPU machine: two training jobs at once on the same device
    solo = _result(_job("cuda", {}))
    pair = [_job("cuda", {}), _job("cuda", {})]
    both = [_result(p) for p in pair]
    assert all(r[0] == solo[0] for r in both)
    # same device and same inputs: without the switch results may differ in the last bits, but both must be finite
    # models that trained; with one visible GPU neither job takes a lock (claim_gpu)
    assert all(len(r[2]) == 64 for r in both)

