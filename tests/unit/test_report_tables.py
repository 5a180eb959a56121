"""Paper-shaped tables on the results pages (issue 48): FedMM's Fig. 4/7 with FedMM's lead over FedAvgSGDA, and
AgnosticFedAvg's Fashion-MNIST check with its lead, each from the tidy table the output also writes, exactly."""

import pandas as pd
import pytest

from fedshift.papers.agnostic_fedavg.report import curves_markdown
from fedshift.papers.fedmm.report import lead_markdown


def _fedmm_runs(fedmm, fedavg, fedprox=None, p=1.0):
    rows = []
    for opt, values in (("fedmm", fedmm), ("fedavg_sgda", fedavg), ("fedprox_sgda", fedprox)):
        for seed, (final, last4) in enumerate(values or []):
            rows.append({"optimizer": opt, "head": "dann", "clients": f"p{p:g}", "p": p, "seed": seed,
                         "final": final, "last4": last4})
    return pd.DataFrame(rows)


def test_fedmm_lead_is_paired_by_seed_with_a_t_interval():
    # leads 10, 20, 30 (final) → mean 20, sd 10, t(0.975, 2) = 4.3027 → half-width 24.84; last4 leads all 5
    runs = _fedmm_runs([(60, 50), (70, 55), (80, 60)], [(50, 45), (50, 50), (50, 55)], [(40, 40)] * 3)
    md = lead_markdown("fig7", runs)
    row = next(line for line in md.splitlines() if line.startswith("| DANN"))
    assert row == "| DANN, p1 | 70.0 ± 10.0 | 50.0 ± 0.0 | 40.0 ± 0.0 | +20.0 [-4.8, +44.8] | +5.0 [+5.0, +5.0] |"
    assert "(3 pairs)" in md
    assert "about 20 points" in md  # the paper's statement under the table


def test_fedmm_lead_leaves_out_unpaired_seeds_and_needs_both_optimizers():
    runs = _fedmm_runs([(60, 60), (70, 70)], [(50, 50)])  # FedAvgSGDA has seed 0 only: one pair, no interval
    md = lead_markdown("fig4", runs)
    row = next(line for line in md.splitlines() if line.startswith("| DANN"))
    assert row.endswith("| +10.0 | +10.0 |") and "(1 pairs)" in md
    alone = lead_markdown("fig1", _fedmm_runs([], [(50, 50), (52, 52)]))
    assert "FedMM −" not in alone and "| DANN, p = 1 | 51.0 ± 1.4 |" in alone


@pytest.mark.parametrize("metric, lead", [("accuracy", "+15.00 [+2.58, +27.42]"),
                                          ("perplexity", "-0.15 [-0.27, -0.03]")])
def test_agnostic_fedavg_check_table_leads_with_the_second_algorithm_whichever_way_is_better(metric, lead):
    rows = []
    for seed, (base, agn) in enumerate([(0.5, 0.6), (0.5, 0.65), (0.5, 0.7)]):
        for rnd, scale in ((10, 0.5), (20, 1.0)):
            rows += [{"experiment": "e", "algorithm": "fedavg_uniform", "seed": seed, "round": rnd,
                      f"worst_{metric}": base * scale},
                     {"experiment": "e", "algorithm": "agnostic_fedavg", "seed": seed, "round": rnd,
                      f"worst_{metric}": agn * scale}]
    md = curves_markdown(pd.DataFrame(rows), {"fedavg_uniform": "FedAvg", "agnostic_fedavg": "AFA"}, metric, "T",
                         {"e": "E"}, last=2)
    row = next(line for line in md.splitlines() if line.startswith("| E"))
    # accuracy in %: leads 10, 15, 20 → mean 15, sd 5, half-width 4.3027·5/√3 = 12.42; perplexity (lower is better):
    # FedAvg − AFA = −0.10, −0.15, −0.20 → −0.15 ± 0.124
    assert lead in row
    assert "rounds 10–20" in md
