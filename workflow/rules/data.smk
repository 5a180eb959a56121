# Raw data: one download rule per dataset (from the mirror in `data_mirror`, else the canonical
# URLs; checksums verified), decoded once into tensors, then split into domains.


for _ds in DATASETS:

    rule:
        name:
            f"download_{_ds}"
        output:
            raw_files(_ds),
        params:
            # only what defines the bytes: switching the mirror or the network settings must not
            # make the verified data look stale (the script reads those from the config)
            dataset=_ds,
            files=[(f["name"], f["sha256"], f["hash_of"]) for f in config["datasets"][_ds]["files"]],
        log:
            f"results/logs/download/{_ds}.log",
        localrule: True
        retries: 2
        conda:
            ENV
        script:
            "../scripts/download.py"


rule prepare:
    input:
        raw_files_of,
    output:
        "data/prepared/{dataset}.pt",
    params:
        library=LIBRARY,
    log:
        "results/logs/prepare/{dataset}.log",
    conda:
        ENV
    script:
        "../scripts/prepare.py"


rule partition:
    input:
        prepared_of,
    output:
        "data/partitions/{experiment}.json",
    params:
        spec=partition_spec,
        library=LIBRARY,
    log:
        "results/logs/partition/{experiment}.log",
    conda:
        ENV
    script:
        "../scripts/partition.py"
