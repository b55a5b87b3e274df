#!/usr/bin/env bash
# The GPU smoke DAG (issue 11): every stage command of the workflow, in DAG order, on one GPU, with
# the config slices Snakemake would pass (rules/*.smk), timed, with GPU memory sampled per phase.
#
#   bash benchmarks/h200_smoke.sh PHASE... [-- CONFIG]
#   phases: prep (data + model), barc (inference, execute, refinement dataset), train (max_steps of the
#   preset, checkpoint every save_steps), resume (the same run continued one step further from its
#   last checkpoint), eval (baseline, baseline with the adapter, refinements by base and adapter,
#   report), all (= prep barc train resume eval)
#
# Environment: CONFIG (default config/h200-smoke.yaml), WORK (results, default /tmp/h200-smoke: on
# the lent machine /tmp outlives one command), OUT (where logs.tar.gz and summary.txt go; default
# $WORK/out), PYTHON (default python3), FALLBACK_DATASET (a refinement parquet used for training when
# the random model's own refinement dataset is empty).
# Phases are separate so that each command sent to the lent GPU stays under its 10-minute limit.
set -uo pipefail

CONFIG=${CONFIG:-config/h200-smoke.yaml}
WORK=${WORK:-/tmp/h200-smoke}
OUT=${OUT:-$WORK/out}
PYTHON=${PYTHON:-python3}
R=$WORK/results
LOGS=$WORK/logs
mkdir -p "$R" "$LOGS" "$OUT"
export PYTHONUNBUFFERED=1

# The JSON of one config section (like rules/common.smk's config_slice: the config completed and checked by
# arc_pipeline/config/prepare.py), with key=value overrides.
slice() {
    "$PYTHON" - "$CONFIG" "$@" <<'EOF'
import json, sys, yaml
from arc_pipeline.config.prepare import prepare_config
config = yaml.safe_load(open(sys.argv[1]))
prepare_config(config, {}, ".")
value = config
for key in sys.argv[2].split("."):
    value = value[key]
value = dict(value)
for item in sys.argv[3:]:
    key, raw = item.split("=", 1)
    value[key] = json.loads(raw)
print(json.dumps(value, sort_keys=True))
EOF
}

# `execute` with `evaluate.execute` merged over it (rules/evaluate.smk's evaluation_execution).
eval_execution() {
    "$PYTHON" - "$CONFIG" <<'EOF'
import json, sys, yaml
from arc_pipeline.config.prepare import prepare_config
config = yaml.safe_load(open(sys.argv[1]))
prepare_config(config, {}, ".")
own = {k: v for k, v in config["evaluate"]["execute"].items() if v is not None}
print(json.dumps(dict(config["execute"], **own), sort_keys=True))
EOF
}

# refine-prompts' slice (rules/evaluate.smk's refine_prompts_slice): prompts per task and the
# refinement inference's context, max_tokens and double_bos.
refine_prompts_cfg() {
    "$PYTHON" - "$CONFIG" <<'EOF'
import json, sys, yaml
from arc_pipeline.config.prepare import prepare_config
config = yaml.safe_load(open(sys.argv[1]))
prepare_config(config, {}, ".")
inference = dict(config["inference"])
if config["evaluate"]["refinement_max_model_len"] is not None:
    inference["max_model_len"] = config["evaluate"]["refinement_max_model_len"]
value = {"refinement_prompts": config["evaluate"]["refinement_prompts"]}
value.update({k: inference[k] for k in ("max_model_len", "max_tokens", "double_bos") if k in inference})
print(json.dumps(value, sort_keys=True))
EOF
}

# One value of the checked config: `cfg_value "w.train.max_steps"` (w = arc_pipeline's WorkflowConfig).
cfg_value() {
    "$PYTHON" -c "import sys, yaml; from arc_pipeline.config.prepare import prepare_config
w = prepare_config(yaml.safe_load(open(sys.argv[1])), {}, '.'); print(eval(sys.argv[2], {}, {'w': w}))" "$CONFIG" "$1"
}

# step NAME STAGE ARGS...: one stage command, its log in $LOGS/NAME.log, its time in timings.tsv.
step() {
    local name=$1
    shift
    local started=$(date +%s.%N)
    echo "== $(date -u +%H:%M:%S) $name: arc-pipeline $*" | cut -c1-400
    "$PYTHON" -m arc_pipeline.cli --log-file "$LOGS/$name.log" "$@" >"$LOGS/$name.out" 2>&1
    local rc=$?
    local seconds=$(awk "BEGIN{print $(date +%s.%N) - $started}")
    printf '%s\t%s\t%.1f\t%s\n' "$PHASE" "$name" "$seconds" "$rc" >>"$LOGS/timings.tsv"
    echo "   rc=$rc in ${seconds}s"
    if [ $rc -ne 0 ]; then
        tail -n 40 "$LOGS/$name.out"
        return $rc
    fi
}

# GPU memory and load, once a second, while a phase runs (peak memory comes from here).
start_sampler() {
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader,nounits -l 1 \
            >"$LOGS/$PHASE.gpu.csv" 2>/dev/null &
        SAMPLER=$!
    fi
}
stop_sampler() {
    if [ -n "${SAMPLER:-}" ]; then
        kill "$SAMPLER" 2>/dev/null
        wait "$SAMPLER" 2>/dev/null
        SAMPLER=
        local peak=$(awk -F', ' 'BEGIN{m=0} {if ($2+0>m) m=$2+0} END{print m}' "$LOGS/$PHASE.gpu.csv")
        printf '%s\tpeak_gpu_memory_mib\t%s\n' "$PHASE" "$peak" >>"$LOGS/memory.tsv"
        echo "   $PHASE: peak GPU memory ${peak} MiB"
    fi
}

phase_prep() {
    step barc_download barc-download --output "$R/barc_download/data.jsonl" --config-json "$(slice barc.download)" &&
    step barc_tasks barc-tasks --input "$R/barc_download/data.jsonl" --output "$R/barc_tasks/tasks.parquet" \
        --config-json "$(slice barc.tasks)" &&
    step barc_split barc-split --tasks "$R/barc_tasks/tasks.parquet" --part 1 --output "$R/barc_split/part1.parquet" \
        --config-json "$(slice barc.split)" &&
    step arc_tasks arc-tasks --output "$R/arc_tasks/tasks.parquet" --config-json "$(slice arc_tasks)" &&
    step model model --tasks "$R/barc_tasks/tasks.parquet" --output "$R/model/base" --config-json "$(slice model)"
}

phase_barc() {
    # One part, one shard (the preset's scale); the shard and gather stages run as in the workflow.
    step shard shard --tasks "$R/barc_split/part1.parquet" --index 0 --count 1 \
        --output "$R/inference/barc/part1/shard0.tasks.parquet" &&
    step inference_barc inference --tasks "$R/inference/barc/part1/shard0.tasks.parquet" --model "$R/model/base" \
        --output "$R/inference/barc/part1/shard0.parquet" --config-json "$(slice inference)" &&
    step gather gather --schema predictions --inputs "$R/inference/barc/part1/shard0.parquet" \
        --output "$R/inference/barc/part1.parquet" &&
    step execute_barc execute --predictions "$R/inference/barc/part1.parquet" --tasks "$R/barc_split/part1.parquet" \
        --executions "$R/execute/barc/part1.parquet" --metrics "$R/execute/barc/part1.metrics.parquet" \
        --metrics-md "$R/execute/barc/part1.metrics.md" --errors "$R/execute/barc/part1.errors.parquet" \
        --errors-md "$R/execute/barc/part1.errors.md" --threads 16 --config-json "$(slice execute)" &&
    step refine_dataset refine-dataset --tasks "$R/barc_split/part1.parquet" \
        --predictions "$R/inference/barc/part1.parquet" --executions "$R/execute/barc/part1.parquet" \
        --model "$R/model/base" --output "$R/refine_dataset/refinement.parquet" --config-json "$(slice refine_dataset)" \
        --max-prompt-tokens "$(cfg_value w.train.max_prompt_tokens)"
}

train_dataset() {
    local rows
    rows=$("$PYTHON" -c "import polars as pl, sys; print(pl.read_parquet(sys.argv[1]).height)" \
        "$R/refine_dataset/refinement.parquet")
    if [ "$rows" -gt 0 ] || [ -z "${FALLBACK_DATASET:-}" ]; then
        echo "$R/refine_dataset/refinement.parquet"
    else
        echo "   the refinement dataset is empty: training on $FALLBACK_DATASET" >&2
        echo "$FALLBACK_DATASET"
    fi
}

phase_train() {
    step train train --dataset "$(train_dataset)" --model "$R/model/base" --checkpoint-dir "$R/train/checkpoints" \
        --output "$R/train/adapter" --metrics "$R/train/metrics.parquet" --threads 16 --config-json "$(slice train)"
}

phase_resume() {
    # max_steps is not part of the run's fingerprint: the same run goes on from its last checkpoint.
    local steps=$(($(cfg_value w.train.max_steps) + 1))
    step train_resume train --dataset "$(train_dataset)" --model "$R/model/base" \
        --checkpoint-dir "$R/train/checkpoints" --output "$R/train/adapter" --metrics "$R/train/metrics.parquet" \
        --config-json "$(slice train max_steps=$steps)" &&
    grep -h "resum" "$LOGS/train_resume.log" | head -3
}

evaluate_execute() {
    local run=$1
    step "execute_$run" execute --predictions "$R/evaluate/$run/predictions.parquet" --tasks "$R/arc_tasks/tasks.parquet" \
        --executions "$R/evaluate/$run/executions.parquet" --metrics "$R/evaluate/$run/metrics.parquet" \
        --metrics-md "$R/evaluate/$run/metrics.md" --errors "$R/evaluate/$run/errors.parquet" \
        --errors-md "$R/evaluate/$run/errors.md" --threads 16 --config-json "$(eval_execution)"
}

phase_eval() {
    local n_eval=$(cfg_value w.evaluate.n_eval)
    # the refinement runs' context (rules/evaluate.smk): evaluate.refinement_max_model_len, else inference's
    local context=$(cfg_value "w.evaluate.refinement_max_model_len or w.inference.max_model_len")
    local eval_cfg=$(slice inference n_predictions=$n_eval)
    step inference_baseline inference --tasks "$R/arc_tasks/tasks.parquet" --model "$R/model/base" \
        --output "$R/evaluate/baseline/predictions.parquet" --config-json "$eval_cfg" &&
    evaluate_execute baseline &&
    # Not a workflow rule: the same first-turn job with the trained adapter, for LoRA vs no LoRA speed.
    step inference_baseline_lora inference --tasks "$R/arc_tasks/tasks.parquet" --model "$R/model/base" \
        --adapter "$R/train/adapter" --output "$WORK/lora_baseline/predictions.parquet" --config-json "$eval_cfg" &&
    step refine_prompts refine-prompts --tasks "$R/arc_tasks/tasks.parquet" \
        --predictions "$R/evaluate/baseline/predictions.parquet" --executions "$R/evaluate/baseline/executions.parquet" \
        --model "$R/model/base" --first-predictions "$(cfg_value w.evaluate.first_predictions)" --output "$R/evaluate/refine_prompts.parquet" \
        --dropped "$R/evaluate/refine_prompts.dropped.parquet" \
        --config-json "$(refine_prompts_cfg)" &&
    step inference_refine_base inference --refinements "$R/evaluate/refine_prompts.parquet" --model "$R/model/base" \
        --output "$R/evaluate/refine_base/predictions.parquet" --config-json "$(slice inference max_model_len=$context)" &&
    evaluate_execute refine_base &&
    step inference_refine_rl inference --refinements "$R/evaluate/refine_prompts.parquet" --model "$R/model/base" \
        --adapter "$R/train/adapter" --output "$R/evaluate/refine_rl/predictions.parquet" \
        --config-json "$(slice inference max_model_len=$context)" &&
    evaluate_execute refine_rl &&
    step evaluate evaluate --tasks "$R/arc_tasks/tasks.parquet" \
        --baseline-predictions "$R/evaluate/baseline/predictions.parquet" \
        --baseline "$R/evaluate/baseline/executions.parquet" --refiners base rl \
        --refinement-predictions "$R/evaluate/refine_base/predictions.parquet" "$R/evaluate/refine_rl/predictions.parquet" \
        --refinements "$R/evaluate/refine_base/executions.parquet" "$R/evaluate/refine_rl/executions.parquet" \
        --training-metrics "$R/train/metrics.parquet" --output-dir "$R/evaluate/report" \
        --dropped-refinement-prompts "$R/evaluate/refine_prompts.dropped.parquet" \
        --execution-rules "$(eval_execution | "$PYTHON" -c "import json, sys; print(json.load(sys.stdin).get('rules', 'strict'))")" \
        --config-json "$(slice evaluate)"
}

# Logs, timings and the small tables in one archive (the lent machine returns at most 8 files).
pack() {
    {
        echo "# timings (phase, step, seconds, rc)"
        cat "$LOGS/timings.tsv" 2>/dev/null
        echo "# memory"
        cat "$LOGS/memory.tsv" 2>/dev/null
        echo "# stage figures"
        grep -h "engine ready\|predictions/s\|generated .* completions\|model folder\|random model\|warm-up\|train_runtime\|resum" \
            "$LOGS"/*.log 2>/dev/null | cut -c1-300
    } >"$OUT/summary.txt"
    tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs \
        $(cd "$WORK" && ls results/execute/barc/*.md results/evaluate/*/metrics.md results/evaluate/report/*.md \
            results/train/metrics.parquet results/model/base/model.json results/model/base/config.json 2>/dev/null)
}

PHASES=()
while [ $# -gt 0 ]; do
    case $1 in
        --) CONFIG=$2; shift 2 ;;
        all) PHASES+=(prep barc train resume eval); shift ;;
        prep|barc|train|resume|eval) PHASES+=("$1"); shift ;;
        *) echo "unknown phase $1 (prep, barc, train, resume, eval, all)" >&2; exit 2 ;;
    esac
done
[ ${#PHASES[@]} -gt 0 ] || { echo "usage: $0 PHASE... [-- CONFIG]" >&2; exit 2; }

status=0
for PHASE in "${PHASES[@]}"; do
    echo "#### phase $PHASE ($CONFIG, results in $R)"
    start_sampler
    "phase_$PHASE"
    status=$?
    stop_sampler
    [ $status -eq 0 ] || break
done
pack
exit $status
