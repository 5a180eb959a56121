"""Gather the device check's outputs into ``device_check.json`` and ``summary.md`` (the last step of ``device_check``).

Reads, from the folder given: ``steps.tsv`` (step, exit status, seconds, limit), ``env.json``, ``engine.json``, the
pytest JUnit files ``cuda_tests.xml`` and ``compat_tests.xml``, and the paper-scale projection (``projection.json``
and its table ``projection.md``, ``benchmarks/paper_scale_projection.py``); any of them may be missing (a step that
failed or did not run), which the summary says. ``steps.tsv`` is folded into ``device_check.json`` and
``projection.md`` into ``summary.md``, and both are removed, so the folder keeps at most 8 files (what the device
tool brings back).

Usage::

    python benchmarks/device_report.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def junit(path: Path) -> dict | None:
    """Counts and the failing tests (name and the message's first 400 characters) of a pytest JUnit file."""
    if not path.is_file():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    out["time_s"] = round(sum(float(s.get("time", 0)) for s in suites), 1)
    bad, skipped = [], []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for tag in ("failure", "error"):
            for el in case.findall(tag):
                bad.append({"test": name, "kind": tag, "message": (el.get("message") or el.text or "")[:400]})
        if case.find("skipped") is not None:
            skipped.append(name)
    out["failed"] = bad
    out["skipped_tests"] = skipped[:50]
    return out


def steps(path: Path) -> list[dict]:
    """The rows of ``steps.tsv``."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, rc, secs, limit = line.split("\t")
        rows.append({"step": name, "rc": int(rc), "seconds": int(secs), "limit_s": int(limit),
                     "timed_out": int(rc) in (124, 137)})
    return rows


def _fmt(v, spec=".3f") -> str:
    return "–" if v is None else format(v, spec)


def engine_table(engine: dict) -> list[str]:
    """Markdown rows of the engine benchmark: one per (model, C), batched next to sequential."""
    rows = engine.get("rows", [])
    lines = ["| model | clients/round | batched s/round | sequential s/round | speed-up | batched peak MiB "
             "| sequential peak MiB | batched GPU util % (mean/max) | sequential GPU util % (mean/max) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    keys = sorted({(r["model"], r["clients_per_round"]) for r in rows}, key=lambda k: (k[0] != "mlr", k[0], k[1]))
    for model, c in keys:
        by = {r["path"]: r for r in rows if r["model"] == model and r["clients_per_round"] == c}
        b, s = by.get("batched", {}), by.get("sequential", {})
        mem = "peak_mem_mib" if "peak_mem_mib" in (b or s) else "peak_rss_mib"
        util = lambda r: f"{_fmt(r.get('gpu_util_mean_pct'), '.0f')}/{_fmt(r.get('gpu_util_max_pct'), '.0f')}"  # noqa: E731
        lines.append(f"| {model} | {c} | {_fmt(b.get('s_per_round'), '.4f')} | {_fmt(s.get('s_per_round'), '.4f')} | "
                     f"{_fmt(b.get('speedup_vs_sequential'), '.2f')}{'×' if b.get('speedup_vs_sequential') else ''} | "
                     f"{_fmt(b.get(mem), '.0f')} | "
                     f"{_fmt(s.get(mem), '.0f')} | {util(b)} | {util(s)} |")
    return lines


def main(out_dir: str) -> dict:
    """Write ``device_check.json`` and ``summary.md`` under ``out_dir``; return the JSON record."""
    out = Path(out_dir)
    load = lambda name: json.loads((out / name).read_text()) if (out / name).is_file() else None  # noqa: E731
    record = {"steps": steps(out / "steps.tsv"), "env": load("env.json"), "engine": load("engine.json"),
              "cuda_tests": junit(out / "cuda_tests.xml"), "compat_tests": junit(out / "compat_tests.xml")}
    projection = load("projection.json")
    record["projection"] = None if projection is None else {  # the totals; every group stays in projection.json
        k: projection.get(k) for k in ("device", "device_name", "torch", "cuda", "tiny", "final", "budget_s",
                                       "elapsed_s", "all")} | {
        "papers": {p: {k: v for k, v in s.items() if k != "experiments"} for p, s in projection["papers"].items()}}
    record["ok"] = bool(record["steps"]) and all(s["rc"] == 0 for s in record["steps"])
    env = record["env"] or {}
    md = ["# fedshift device check", "",
          f"GPU: {env.get('gpu', 'none')} ({env.get('gpu_memory_gib', '?')} GiB); torch {env.get('torch', '?')}, "
          f"CUDA {env.get('cuda', '?')}, cuDNN {env.get('cudnn', '?')}, Python {env.get('python', '?')}; "
          f"device asked: {env.get('device', '?')}.", "",
          "| step | exit | seconds | limit |", "| --- | ---: | ---: | ---: |"]
    md += [f"| {s['step']} | {s['rc']}{' (timed out)' if s['timed_out'] else ''} | {s['seconds']} | {s['limit_s']} |"
           for s in record["steps"]]
    for key, title in (("cuda_tests", "CUDA tests (tests/cuda)"), ("compat_tests", "unit subset on this torch")):
        t = record[key]
        md += ["", f"## {title}", ""]
        if t is None:
            md.append("no result (the step failed before pytest wrote its report, or did not run)")
            continue
        md.append(f"{t['tests']} tests: {t['failures']} failed, {t['errors']} errors, {t['skipped']} skipped, "
                  f"{t['time_s']} s")
        md += [f"- **{f['kind']}** `{f['test']}`: {f['message'].splitlines()[0] if f['message'] else ''}"
               for f in t["failed"]]
    md += ["", "## Engine: FedAvg on Fashion-MNIST, batched vs sequential", ""]
    if record["engine"]:
        e = record["engine"]
        w = e.get("workload", {})
        md.append(f"{w.get('clients')} clients × {w.get('per_client')} images ({w.get('data')}), E = 1, B = 10, "
                  f"lr 0.05; median over the measured rounds after one warm-up; device {e.get('device')}.")
        md += [""] + engine_table(e)
        if e.get("skipped"):
            md += ["", "Not measured (the benchmark's time budget ran out): " + ", ".join(
                f"{s['model']}/{s['path']}/C={s['clients_per_round']}" for s in e["skipped"])]
    else:
        md.append("no result")
    md += [""]
    if (out / "projection.md").is_file():
        md += (out / "projection.md").read_text().rstrip("\n").splitlines()
        md += ["", "Every group (measured or extrapolated, and from what): projection.json."]
    else:
        md += ["## Paper-scale projection", "", "no result"]
    (out / "device_check.json").write_text(json.dumps(record, indent=1))
    (out / "summary.md").write_text("\n".join(md) + "\n")
    (out / "steps.tsv").unlink(missing_ok=True)
    (out / "projection.md").unlink(missing_ok=True)
    return record


if __name__ == "__main__":
    main(sys.argv[1])
