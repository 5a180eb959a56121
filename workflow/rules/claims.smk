# Verdicts: every paper's headline claims (config `claims:`, one list per paper in config/papers/<paper>.yaml)
# checked against the tidy tables this configuration builds -> results/tables/claims.{csv,md} (target `claims`),
# the first page of `snakemake --report`. A claim whose table is not built says why: `needs data: <dataset>` when a
# dataset its `data:` names is missing from the data mirror, else `not run` with the reason in its note; smoke and
# rehearsal scales are computed but "not judged". Logic: fedshift.claims.
from fedshift.claims import NOT_AMONG_CLAIMS_PAPERS, claim_tables, config_label, validate_claims

CLAIMS = config.get("claims", {})
try:
    validate_claims(CLAIMS)
except ValueError as err:
    sys.exit(f"fedshift: config error at {err}")
# --- confirmatory design (fedshift.claims.design): a run that names a design hash runs only under that design -------
if config.get("design_hash"):
    from fedshift.claims.design import DesignError, DesignMismatchError, require_design

    try:
        require_design(config["design_hash"], ROOT / "config" / "design" / "confirmatory.yaml", claims=CLAIMS)
    except (DesignError, DesignMismatchError) as err:
        sys.exit(f"fedshift: config error at design_hash: {err}")
# --- end confirmatory design ----------------------------------------------------------------------------------------
_wanted = config.get("claims_papers", list(CLAIMS))
CLAIMS_PAPERS = [p.strip() for p in (_wanted.split(",") if isinstance(_wanted, str) else _wanted) if p.strip()]
_unknown = sorted(set(CLAIMS_PAPERS) - set(CLAIMS))
if _unknown:
    sys.exit(f"fedshift: config error at claims_papers: {_unknown} have no claims (papers: {sorted(CLAIMS)})")
# tables this configuration builds: every paper's outputs (a plug-in's include each figure's tidy data)
_built = set(all_outputs())
# every claim is listed; only those of CLAIMS_PAPERS get their tables built (the others read "not run")
CLAIM_INPUTS = [t for t in claim_tables({p: CLAIMS[p] for p in CLAIMS_PAPERS}) if t in _built]
# why each other table is not read (the claims' `note`)
_judged = set(claim_tables({p: CLAIMS[p] for p in CLAIMS_PAPERS}))
_scale = config.get("scale", "paper")
CLAIMS_NOT_RUN = {
    t: NOT_AMONG_CLAIMS_PAPERS if t not in _judged else f"not built at {_scale} scale (not among its outputs)"
    for t in claim_tables(CLAIMS)
    if t not in CLAIM_INPUTS
}


# a second run of the same claims (e.g. under portable_cpu, in its own results tree): its verdicts beside ours
CLAIMS_SECOND_RUN = config.get("claims_second_run", "") or ""
# a confirmatory run (config design_hash): the design whose hash every run of its experiments must record
CLAIMS_DESIGN = {"design": str(ROOT / "config" / "design" / "confirmatory.yaml")} if config.get("design_hash") else {}


rule claims:
    input:
        CLAIM_INPUTS,
        second=[CLAIMS_SECOND_RUN] if CLAIMS_SECOND_RUN else [],
    output:
        csv=verdict_report("results/tables/claims.csv"),
        md=verdict_report("results/tables/claims.md"),
    params:
        **CLAIMS_DESIGN,
        claims=CLAIMS,
        tables=CLAIM_INPUTS,
        scale=config.get("scale", "paper"),
        missing_data=claims_missing_data(),
        not_run=CLAIMS_NOT_RUN,
        # the overlays named on the command line (config/config.yaml and the papers' files always apply)
        config=config_label(workflow.overwrite_configfiles, str(ROOT)),
        # the run.json of every run of the judged papers: the machine(s) named in the verdicts' heading
        runs=[f"results/runs/{s.path}/run.json" for s in RUNS.values() if s.paper in CLAIMS_PAPERS],
    log:
        "results/logs/tables/claims.log",
    localrule: True
    conda:
        ENV
    script:
        "../scripts/claims.py"
