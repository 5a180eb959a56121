"""Evaluation columns (per domain, U, D_Λ), aggregation over seeds, and experiment data assembly."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedshift.models import LogisticRegression
from fedshift.papers.afl.data import evaluate_domains, load_experiment, make_partition
from fedshift.papers.afl.report import aggregate, to_latex, to_markdown
from fedshift.partition import partition_by_domain, split_clients
from fedshift.reporting import save_figure


def test_columns_u_and_d_lambda():
    module = LogisticRegression(1, 2)
    params = {"linear.weight": torch.tensor([[-1.0], [1.0]]), "linear.bias": torch.zeros(2)}
    # domain a: 3 of 4 correct; domain b: 1 of 2 correct. Class 1 is predicted for x > 0.
    test = [(torch.tensor([[1.0], [2.0], [-1.0], [3.0]]), torch.tensor([1, 1, 0, 0])),
            (torch.tensor([[1.0], [1.0]]), torch.tensor([1, 0]))]
    rows = {(r["column"], r["metric"]): r["value"] for r in evaluate_domains(module, params, test, ["a", "b"])}
    assert rows[("a", "accuracy")] == 0.75 and rows[("b", "accuracy")] == 0.5
    assert rows[("U", "accuracy")] == pytest.approx(4 / 6)
    assert rows[("D_Lambda", "accuracy")] == 0.5
    assert rows[("D_Lambda", "loss")] == max(rows[("a", "loss")], rows[("b", "loss")])
    nll_a = [  # logit gaps z_y − z_other: 2, 4, 2 (correct) and −6 (wrong)
math.log1p(math.exp(-2.0)), math.log1p(math.exp(-4.0)), math.log1p(math.exp(-2.0)),
             math.log1p(math.exp(6.0))]
    assert rows[("a", "loss")] == pytest.approx(sum(nll_a) / 4)


def test_aggregate_mean_std_and_rendering():
    df = pd.DataFrame({"experiment": "e", "model": ["afl", "afl", "uniform", "uniform"], "seed": [0, 1, 0, 1],
                       "column": "D_Lambda", "metric": "accuracy", "value": [0.7, 0.8, 0.6, 0.6]})
    t = aggregate(df)
    afl = t[t.model == "afl"].iloc[0]
    assert afl["mean"] == pytest.approx(0.75) and afl["std"] == pytest.approx(np.std([0.7, 0.8], ddof=1))
    assert afl["n_seeds"] == 2
    spec = {"title": "T.", "rows": ["uniform", "afl"], "columns": ["D_Lambda"],
            "reference": {"afl": {"D_Lambda": "71.5 ± 0.9"}}}
    md = to_markdown(t, spec)
    assert "75.00 ± 7.07" in md and "60.00 ± 0.00" in md
    rows = {line.split(" | ")[0]: line for line in md.splitlines() if line.startswith("| L_")}
    assert rows["| L_D_Λ (AFL)"].endswith("| 75.00 ± 7.07<br>[71.5 ± 0.9] |")  # ours over the paper's, one cell
    assert rows["| L_Û (uniform)"].endswith("| 60.00 ± 0.00 |")  # no paper value: ours alone
    assert r"75.00 $\pm$ 7.07" in to_latex(t, spec)
    with pytest.raises(ValueError, match="duplicate"):
        aggregate(pd.concat([df, df]))


def test_partition_helpers():
    parts = partition_by_domain(np.array([0, 1, -1, 1, 0]), ["x", "y"])
    assert parts["x"].tolist() == [0, 4] and parts["y"].tolist() == [1, 3]
    with pytest.raises(ValueError, match="empty"):
        partition_by_domain(np.array([0, 0]), ["x", "y"])
    split = split_clients(np.arange(10), 3, seed=0)
    assert sorted(np.concatenate(split).tolist()) == list(range(10))
    assert [len(s) for s in split] == [4, 3, 3]
    assert all(np.array_equal(a, b) for a, b in zip(split, split_clients(np.arange(10), 3, seed=0), strict=True))


def test_fashion_mnist_domains_and_standardisation(mirror_dir, tmp_path):
    from fedshift.data.prepare import load_prepared, prepare_dataset

    prepare_dataset("fashion_mnist", mirror_dir / "fashion-mnist", tmp_path / "f.pt")
    prepared = load_prepared(tmp_path / "f.pt")
    exp = {"dataset": "fashion_mnist", "domains": {"by": "label", "classes": [0, 2, 6],
                                                   "names": ["t-shirt/top", "pullover", "shirt"]},
           "preprocess": {"scale": 255.0, "standardize": "per_feature", "eps": 0.001}}
    part = make_partition(exp, prepared, seed=0)
    assert {k: len(v) for k, v in part["train"].items()} == {"t-shirt/top": 6000, "pullover": 6000, "shirt": 6000}
    assert {k: len(v) for k, v in part["test"].items()} == {"t-shirt/top": 1000, "pullover": 1000, "shirt": 1000}
    data = load_experiment(exp, prepared, part, torch.device("cpu"), torch.float64)
    assert data.input_dim == 784 and data.num_classes == 3
    assert [int(c.y.unique()) for c in data.clients] == [0, 1, 2]
    x = torch.cat([c.x for c in data.clients])
    assert x.mean(0).abs().max() < 1e-6  # standardised with the training statistics
    idx = torch.tensor(sum((part["train"][n] for n in part["domains"]), []))
    raw_sd = (prepared["x_train"][idx].double().flatten(1) / 255.0).std(0, unbiased=False)
    torch.testing.assert_close(x.std(0, unbiased=False), raw_sd / (raw_sd + 0.001))  # (x − μ)/(σ + eps)


def test_adult_domain_sizes(mirror_dir, tmp_path):
    from fedshift.data.prepare import load_prepared, prepare_dataset

    prepare_dataset("adult", mirror_dir / "adult", tmp_path / "a.pt")
    prepared = load_prepared(tmp_path / "a.pt")
    exp = {"dataset": "adult", "domains": {"by": "domain"}, "preprocess": {"standardize": "none"}}
    part = make_partition(exp, prepared, seed=0)
    sizes = {s: {k: len(v) for k, v in part[s].items()} for s in ("train", "test")}
    assert sizes == {"train": {"doctorate": 413, "non-doctorate": 32148},
                     "test": {"doctorate": 181, "non-doctorate": 16100}}
    data = load_experiment(exp, prepared, part, torch.device("cpu"))
    assert data.input_dim == 99 and data.num_classes == 2


def test_save_figure_writes_each_format_reproducibly_and_closes(tmp_path):
    import matplotlib.pyplot as plt

    def draw():
        fig, ax = plt.subplots()
        ax.plot([0, 1, 2], [1, 0, 1])
        return fig

    fig = draw()
    save_figure(fig, tmp_path / "a.pdf", tmp_path / "a.png")
    assert not plt.fignum_exists(fig.number)
    assert (tmp_path / "a.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "a.png").read_bytes().startswith(b"\x89PNG")
    save_figure(draw(), tmp_path / "b.pdf")
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()  # no creation date
    with pytest.raises(ValueError, match="no suffix"):
        save_figure(draw(), tmp_path / "figure")
    assert not (tmp_path / "figure").exists()


def test_plot_spread_draws_bands_and_error_bars():
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from fedshift.reporting import plot_spread

    fig, ax = plt.subplots()
    plot_spread(ax, [1, 2, 3], [0.5, 0.6, 0.7], [0.1, float("nan"), 0.2], band=True, label="curve")
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(0.4) and ys.max() == pytest.approx(0.9)   # ±1 std; NaN std → no spread there
    plot_spread(ax, [1, 2], [3.0, 4.0], [0.5, 0.25], label="points")
    (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    segs = bars.lines[2][0].get_segments()
    assert [tuple(s[:, 1]) for s in segs] == [(2.5, 3.5), (3.75, 4.25)]
    plt.close(fig)
