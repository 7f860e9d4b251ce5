#!/usr/bin/env bash
# A comparison as the README shows it: its commands (the robust statistics and the budget curve added), each
# command's output kept in a folder and each stage's time printed. Run from the repository's root:
#   bash benchmarks/comparison/run.sh [GLUE_DIR] [STORE] [SPACE]
# (defaults: $GLUE_DIR, ./comparison, minilm_sst2; without either GLUE folder it stops and says so). SPACE names a grid in search_spaces/
# whose seeds stage is SPACE_seeds; minilm_sst2's record is this folder (about 75 minutes on two idle cores), any
# other's the folder SPACE/ beside this script (minilm_stsb: about 90 minutes). tests/docs/test_comparison_record.py
# checks that the README and docs/searching.md show what these files hold.
set -uo pipefail
data=${1:-${GLUE_DIR:?give the GLUE folder as the first argument or set GLUE_DIR}}
store=${2:-comparison}
space=${3:-minilm_sst2}
experiment=${space//_/-}
out=$(cd "$(dirname "$0")" && pwd)
[ "$space" = minilm_sst2 ] || out="$out/$space"
mkdir -p "$out"
timed() {  # timed NAME COMMAND...: the command's output in NAME, its time and exit status on standard output
    local name=$1 began
    shift
    began=$(date +%s)
    "$@" > "$out/$name" 2>&1
    echo "$name: rc=$? $(( $(date +%s) - began )) s"
}
timed grid.log istar-tune search "$space" --data-dir "$data" --storage-path "$store"
timed seeds.log istar-tune search "${space}_seeds" --data-dir "$data" --storage-path "$store"
timed best.md istar-tune table --storage-path "$store" --experiment "$experiment" --kind best
timed seeds.md istar-tune table --storage-path "$store" --experiment "$experiment-seeds" --kind seeds --stats all
timed budget.md istar-tune table --storage-path "$store" --experiment "$experiment" --kind budget
timed replay.md istar-tune replay --storage-path "$store" --experiment "$experiment"
timed plots.txt istar-tune plots --storage-path "$store" --experiment "$experiment" --output-dir "$out/plots"
