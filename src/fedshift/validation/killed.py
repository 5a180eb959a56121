"""The workflow's report of jobs killed by a signal (``onerror``, ``workflow/rules/common.smk``)."""

from __future__ import annotations

import re

__all__ = ["KILLED", "killed_jobs", "explain_killed_jobs"]

_JOB_HEADER = re.compile(r"^(?:local)?rule (\S+):$")
_JOB_ERROR = re.compile(r"RuleException:\n((?:(?!RuleException:).)*?)Error in rule (\S+):\n((?:    [^\n]*\n)*)",
                        re.S)
#: Texts of a Snakemake log that say a job was killed outright (SIGKILL: the kernel's OOM killer, a scheduler's
#: memory limit, ``kill -9``) or by SLURM for memory.
KILLED = ("<Signals.SIGKILL: 9>", "exit status 137", "exit status -9", "OUT_OF_MEMORY")


def killed_jobs(log_text: str) -> list[dict[str, str]]:
    """The jobs of a Snakemake log that failed by SIGKILL or for memory, with what the log says of each.

    Each ``RuleException`` is paired with the ``Error in rule`` block that follows it. Two jobs that fail within the
    same moment can print these interleaved (another job's block between an exception and its own), and the log then
    does not say which exception is whose: the report may name the other job. The kill itself is still reported.

    Returns
    -------
    list of dict
        ``rule``, ``jobid``, ``wildcards`` and ``mem_mb`` (from the job's header in the log; empty when absent)
        and ``how`` (the text that shows the kill).
    """
    headers: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in log_text.splitlines():
        m = _JOB_HEADER.match(line)
        if m:
            current = {"rule": m.group(1)}
            continue
        if current is not None and line.startswith("    "):
            key, _, value = line.strip().partition(": ")
            if key == "jobid":
                headers[value] = current
            elif key in ("wildcards", "resources"):
                current[key] = value
        else:
            current = None
    out = []
    for m in _JOB_ERROR.finditer(log_text if log_text.endswith("\n") else log_text + "\n"):
        how = next((k for k in KILLED if k in m.group(1)), None)
        jobid = re.search(r"^    jobid: (\S+)$", m.group(3), re.M)
        if how is None or jobid is None:
            continue
        head = headers.get(jobid.group(1), {})
        mem = re.search(r"\bmem_mb=(\d+)", head.get("resources", ""))
        out.append({"rule": m.group(2), "jobid": jobid.group(1), "wildcards": head.get("wildcards", ""),
                    "mem_mb": mem.group(1) if mem else "", "how": how})
    return out


def explain_killed_jobs(log_text: str) -> list[str]:
    """One line per killed job of a Snakemake log: the job, its ``mem_mb``, the likely cause and what to do."""
    lines = []
    for j in killed_jobs(log_text):
        job = f"{j['rule']} ({j['wildcards']})" if j["wildcards"] else j["rule"]
        mem = f", which had mem_mb = {j['mem_mb']}," if j["mem_mb"] else ""
        cause = ("killed by SLURM for exceeding its memory" if j["how"] == "OUT_OF_MEMORY" else
                 "killed by SIGKILL (under a memory limit, most likely by the out-of-memory killer)")
        lines.append(f"fedshift: job {job}{mem} was {cause}. Its checkpoint is kept and every output it wrote "
                     "is atomic: rerun to resume; if it recurs, raise that run's resources.mem_mb in its paper's "
                     "config.")
    return lines

