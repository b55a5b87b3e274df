rule barc_download:
    output:
        result("barc_download/data.jsonl"),
    log:
        log_path("barc_download"),
    benchmark:
        benchmark_path("barc_download")
    params:
        cfg=config_slice("barc", "download"),
    shell:
        "arc-pipeline --log-file {log} barc-download --output {output} --config-json {params.cfg}"


# A hub download needs the internet, which HTCondor execute nodes often lack: it runs on the
# submit machine (a local copy or the bundled sample costs nothing there either).
localrules:
    barc_download,
