# FedPALS's synthetic task (§5.2, App. A.2; Fig. 4): one job per seed trains FedAvg and every FedPALS λ candidate
# per δ on Gaussian data and keeps the λ chosen on a target-like validation sample. Many small models per seed and
# no run to store, so it is a stage of the paper's own (FedpalsPaper.rules), not a contract run.
from fedshift.codehash import code_hash
from fedshift.papers.fedpals.config import synthetic_spec
from fedshift.papers.fedpals.paper import FedpalsPaper

FEDPALS_SYNTHETIC = [p for p in PAPER_PLUGINS.values() if isinstance(p, FedpalsPaper)][-1]
FEDPALS_SYNTHETIC_SCRIPT = Path(workflow.current_basedir) / "scripts" / "synthetic.py"


rule fedpals_synthetic:
    output:
        f"results/runs/{FEDPALS_SYNTHETIC.name}/synthetic/seed~{{seed}}/metrics.csv",
    params:
        spec=synthetic_spec(FEDPALS_SYNTHETIC.section, config.get("budget")),
        code=_portable_marked(code_hash(FEDPALS_SYNTHETIC_SCRIPT, algorithms=["fedavg", "fedpals"])),
    log:
        f"results/logs/{FEDPALS_SYNTHETIC.name}/synthetic/seed~{{seed}}.log",
    benchmark:
        f"results/benchmarks/{FEDPALS_SYNTHETIC.name}/synthetic/seed~{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=1024,
        runtime=30,
    conda:
        "../../../../envs/fedshift.yaml"
    script:
        "scripts/synthetic.py"
