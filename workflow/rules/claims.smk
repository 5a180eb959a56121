# Verdicts: every paper's headline claims (config `claims:`, one list per paper in config/papers/<paper>.yaml)
# checked against the tidy tables this configuration builds -> results/tables/claims.{csv,md} (target `claims`),
# the first page of `snakemake --report`. A claim whose table is not built at this scale is listed as "not run";
# smoke and rehearsal scales are computed but "not judged". Logic: fedshift.claims.
from fedshift.claims import claim_tables, validate_claims

CLAIMS = config.get("claims", {})
try:
    validate_claims(CLAIMS)
except ValueError as err:
    sys.exit(f"fedshift: config error at {err}")
_wanted = config.get("claims_papers", list(CLAIMS))
CLAIMS_PAPERS = [p.strip() for p in (_wanted.split(",") if isinstance(_wanted, str) else _wanted) if p.strip()]
_unknown = sorted(set(CLAIMS_PAPERS) - set(CLAIMS))
if _unknown:
    sys.exit(f"fedshift: config error at claims_papers: {_unknown} have no claims (papers: {sorted(CLAIMS)})")
# tables this configuration builds: every paper's outputs (a plug-in's include each figure's tidy data)
_built = set(all_outputs())
# every claim is listed; only those of CLAIMS_PAPERS get their tables built (the others read "not run")
CLAIM_INPUTS = [t for t in claim_tables({p: CLAIMS[p] for p in CLAIMS_PAPERS}) if t in _built]


rule claims:
    input:
        CLAIM_INPUTS,
    output:
        csv=verdict_report("results/tables/claims.csv"),
        md=verdict_report("results/tables/claims.md"),
    params:
        claims=CLAIMS,
        tables=CLAIM_INPUTS,
        scale=config.get("scale", "paper"),
    log:
        "results/logs/tables/claims.log",
    localrule: True
    conda:
        ENV
    script:
        "../scripts/claims.py"
