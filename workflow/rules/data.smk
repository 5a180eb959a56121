# Raw data: one download rule per dataset (from the mirror in `data_mirror`, else the canonical
# URLs; checksums verified), decoded (or generated) once into tensors shared by every paper.


for _ds in DATASETS:

    rule:
        name:
            f"download_{_ds}"
        input:
            # the rehearsal's stand-in (config `standin`): copied from data/standin/<dataset>/, checksum not verified
            standin_files(_ds),
        output:
            raw_files(_ds),
        params:
            # only what defines the bytes: switching the mirror or the network settings must not
            # make the verified data look stale (the script reads those from the config)
            dataset=_ds,
            files=[(f["name"], f["sha256"], f["hash_of"]) for f in config["datasets"][_ds]["files"]],
            standin=_ds in STANDIN_DATASETS,
        log:
            f"results/logs/download/{_ds}.log",
        localrule: True
        retries: 2
        conda:
            ENV
        script:
            "../scripts/download.py"


# Stand-in raw files of the datasets the rehearsal replaces (config `standin.datasets`; fedshift.data.standin):
# generated, seeded, in the real formats, in their own folder (never the data mirror).
for _ds in STANDIN_DATASETS:

    rule:
        name:
            f"standin_{_ds}"
        output:
            standin_files(_ds),
        params:
            dataset=_ds,
            seed=config["standin"]["seed"],
            fraction=config["standin"].get("fractions", {}).get(_ds, 1.0),
            code=code_of("standin.py"),
        log:
            f"results/logs/standin/{_ds}.log",
        conda:
            ENV
        script:
            "../scripts/standin.py"


rule prepare:
    input:
        raw_files_of,
    output:
        "data/prepared/{dataset}.pt",
    wildcard_constraints:
        dataset=regex_of(PREPARED_FROM_REGISTRY),
    params:
        code=code_of("prepare.py", modules=DATASET_PLUGIN_FILES),
        dataset_plugins=config.get("dataset_plugins", []),
    log:
        "results/logs/prepare/{dataset}.log",
    resources:
        mem_mb=prepare_mem_mb,
    conda:
        ENV
    script:
        "../scripts/prepare.py"


# datasets generated from several registry datasets (fedshift.data.prepare.GENERATED: MNIST-M from MNIST and
# BSDS500), shared by every paper like the decoded ones
rule prepare_generated:
    input:
        generated_sources,
    output:
        "data/prepared/{generated}.pt",
    wildcard_constraints:
        generated=regex_of(sorted(GENERATED)),
    params:
        code=code_of("prepare_generated.py"),
    log:
        "results/logs/prepare/{generated}.log",
    resources:
        mem_mb=8192,
    conda:
        ENV
    script:
        "../scripts/prepare_generated.py"
