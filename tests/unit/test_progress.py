"""Progress of a training call (log lines with round, loss, worst-domain loss, λ, rate, ETA; a tqdm bar
only on a terminal) and the FEDSHIFT_FAIL_ONCE fault-injection knob of job logging."""

import fcntl
import logging
import os
import re
import struct
import sys
import termios

import pytest
import torch

from fedshift.algorithms.afl import build_stochastic_afl
from fedshift.core.base import ClientData
from fedshift.core.training import format_duration, progress_metrics, run_training
from fedshift.logs import FAIL_ONCE_ENV, InjectedFailure, job_logging
from fedshift.models import LogisticRegression


def _toy():
    g = torch.Generator().manual_seed(0)
    clients = [ClientData(k, torch.randn(n, 3, generator=g) + k, torch.randint(0, 2, (n,), generator=g), k)
               for k, n in enumerate((6, 9))]
    alg = build_stochastic_afl(LogisticRegression(3, 2), num_domains=2, domain_sizes=[6, 9], batch_size=4,
                               client_lr=0.1, lambda_lr=0.05)
    params = {"linear.weight": torch.zeros(2, 3), "linear.bias": torch.zeros(2)}
    return alg, params, clients


LINE = re.compile(r"round (\d+)/40 \((\d+)%\)  loss (\d+\.\d{4})  worst-domain loss (\d+\.\d{4})  "
                  r"lambda \[(\d\.\d{3}), (\d\.\d{3})\]  \d+\.\d rounds/s  elapsed \d+ s  ETA \d+ s")


def test_progress_lines_carry_round_loss_metric_and_eta(caplog):
    alg, params, clients = _toy()
    with caplog.at_level(logging.INFO, logger="fedshift.core.training"):
        res = run_training(alg, params, clients, rounds=40, seed=0, log_every=10)
    found = [LINE.fullmatch(r.getMessage()) for r in caplog.records if r.name == "fedshift.core.training"]
    assert all(found) and len(found) == 4
    assert [int(m.group(1)) for m in found] == [10, 20, 30, 40]
    assert [int(m.group(2)) for m in found] == [25, 50, 75, 100]
    for m, row in zip(found, res.history, strict=True):
        assert float(m.group(3)) == pytest.approx(row["loss"], abs=1e-4)
        assert float(m.group(4)) == pytest.approx(max(row["domain_loss/0"], row["domain_loss/1"]), abs=1e-4)
        assert float(m.group(5)) + float(m.group(6)) == pytest.approx(1, abs=2e-3)
    assert found[-1].group(0).endswith("ETA 0 s")


def test_progress_bar_only_on_a_terminal(monkeypatch, capsys):
    alg, params, clients = _toy()
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(sys, "__stderr__", sys.stderr)  # as in a job: neither stream is a terminal
    run_training(alg, params, clients, rounds=20, seed=0, log_every=10)  # stderr captured: no TTY
    assert "round" not in capsys.readouterr().err
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    with os.fdopen(slave, "w") as tty:
        monkeypatch.setattr(sys, "stderr", tty)
        run_training(alg, params, clients, rounds=20, seed=0, log_every=10)
        tty.flush()
        shown = os.read(master, 65536).decode()
    os.close(master)
    assert "training:" in shown and "/20 [" in shown and "round/s" in shown


def test_duration_format():
    got = [format_duration(s) for s in (0.4, 59.6, 61, 3600 + 125)]
    assert got == ["0 s", "1 min 00 s", "1 min 01 s", "1 h 02 min"]


def test_fail_once_fails_the_first_attempt_of_matching_jobs_only(tmp_path, monkeypatch):
    log_a = tmp_path / "logs/train/a/seed~0.log"
    log_b = tmp_path / "logs/evaluate/a/seed~0.log"
    monkeypatch.setenv(FAIL_ONCE_ENV, "*/train/a/*,*/nothing/*")
    with pytest.raises(InjectedFailure, match="failing this first attempt on purpose"):
        with job_logging(log_a):
            pytest.fail("the block must not run on the first attempt")
    assert "InjectedFailure" in log_a.read_text()
    ran = []
    with job_logging(log_a) as log:
        log.info("second attempt")
        ran.append("a")
    with job_logging(log_b):
        ran.append("b")
    assert ran == ["a", "b"]
    assert "it failed once already, so it runs now" in log_a.read_text()
    assert (tmp_path / "logs/train/a/seed~0.log.failed-once").exists()
    assert not (tmp_path / "logs/evaluate/a/seed~0.log.failed-once").exists()


def test_fail_once_unset_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(FAIL_ONCE_ENV, raising=False)
    with job_logging(tmp_path / "x.log") as log:
        log.info("hello")
    assert "hello" in (tmp_path / "x.log").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["x.log"]


def test_progress_line_shows_evaluations_as_metrics():
    row = {"round": 10, "loss": [0.5, 0.7], "domain_loss/0": [0.4, 0.6], "domain_loss/1": [0.9, 1.1],
           "eval/val_accuracy": [0.75, 0.85], "eval/score": 0.8}
    assert progress_metrics(row) == {"loss": "0.6000", "worst-domain loss": "1.0000", "val_accuracy": "0.8000",
                                      "score": "0.8000"}
