#!/usr/bin/env bash
# `make test`'s pytest: the suite as two pytest sessions at once, the workflow runs (tests/workflow: the canary, the
# embedded default run, the Slurm run beside them) and everything else. Alone, the rest keeps about one of two cores
# busy (single-threaded tests, waits on subprocesses and vLLM starts), so the two sessions together take little
# more than the longer of them (docs/testing.md, "Two sessions at once"). Each session keeps its own fixtures, so
# what every test asserts is unchanged; `pytest` alone still runs the whole suite in one session.
#
#   scripts/run_tests.sh [pytest arguments for both sessions]
#
# The rest streams here; the workflow session writes to a log that is printed when both have ended. The exit
# status is the first failing session's (pytest's own codes), 0 when both passed.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/arc-pipeline-tests.XXXXXX")
workflow_log=$log_dir/workflow.log

"$python" -m pytest tests/workflow "$@" >"$workflow_log" 2>&1 &
workflow_pid=$!
# an interrupted `make test` must not leave the workflow session (and its Snakemake runs) behind
trap 'kill -TERM $workflow_pid 2>/dev/null; wait $workflow_pid 2>/dev/null; exit 130' INT TERM
echo "tests/workflow runs in a second pytest session beside this one; its log: $workflow_log"

"$python" -m pytest --ignore=tests/workflow "$@"
rest_status=$?
echo "the rest ended with status $rest_status; waiting for tests/workflow ($workflow_log)"
wait $workflow_pid
workflow_status=$?
trap - INT TERM

echo "======================== tests/workflow (the second session) ========================"
cat "$workflow_log"
for status in $rest_status $workflow_status; do
  # 5: no tests collected in that session (a selection outside it), not a failure
  if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
    echo "FAILED: the rest ended with status $rest_status, tests/workflow with status $workflow_status"
    exit "$status"
  fi
done
echo "both sessions passed (the rest: status $rest_status, tests/workflow: status $workflow_status)"
