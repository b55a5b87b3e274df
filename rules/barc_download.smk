rule barc_download:
    output:
        result("barc_download/data.jsonl"),
    params:
        cfg=config_slice("barc", "download"),
    log:
        log_path("barc_download"),
    shell:
        "arc-pipeline --log-file {log} barc-download --output {output} --config-json {params.cfg}"
