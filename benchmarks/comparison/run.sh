#!/usr/bin/env bash
# The first page's comparison, as the README shows it: its five commands (the robust statistics and the budget curve
# added), each command's output kept in this folder and each stage's time printed. Run from the repository's root:
#   bash benchmarks/comparison/run.sh [GLUE_DIR] [STORE]
# (defaults: ../shared/data/glue and ./comparison; about 75 minutes on two idle cores). tests/docs/test_comparison.py
# checks that the README and docs/searching.md show what these files hold.
set -uo pipefail
data=${1:-../shared/data/glue}
store=${2:-comparison}
out=$(cd "$(dirname "$0")" && pwd)
timed() {  # timed NAME COMMAND...: the command's output in NAME, its time and exit status on standard output
    local name=$1 began
    shift
    began=$(date +%s)
    "$@" > "$out/$name" 2>&1
    echo "$name: rc=$? $(( $(date +%s) - began )) s"
}
timed grid.log istar-tune search minilm_sst2 --data-dir "$data" --storage-path "$store"
timed seeds.log istar-tune search minilm_sst2_seeds --data-dir "$data" --storage-path "$store"
timed best.md istar-tune table --storage-path "$store" --experiment minilm-sst2 --kind best
timed seeds.md istar-tune table --storage-path "$store" --experiment minilm-sst2-seeds --kind seeds --stats all
timed budget.md istar-tune table --storage-path "$store" --experiment minilm-sst2 --kind budget
timed replay.md istar-tune replay --storage-path "$store" --experiment minilm-sst2
timed plots.txt istar-tune plots --storage-path "$store" --experiment minilm-sst2 --output-dir "$out/plots"
