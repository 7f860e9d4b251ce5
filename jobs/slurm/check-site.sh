#!/usr/bin/env bash
# What jobs/slurm/search.sbatch needs from a Slurm site, one line each (ok, or what to do). Run it on a login node,
# or on a compute node (srun --nodes=1 jobs/slurm/check-site.sh) for what only a compute node can say:
#
#   bash jobs/slurm/check-site.sh [RESULTS]     # RESULTS: where ISTAR_TUNE_RESULTS will be (default istar-runs)
#
# It exits non-zero when a check fails; a warning says what the template does about it.
set -uo pipefail
results=${1:-${ISTAR_TUNE_RESULTS:-istar-runs}}
failed=0
say() { printf '%-9s %s\n' "$1" "$2"; }
fail() { say "FAIL" "$1"; failed=1; }

if command -v sbatch > /dev/null; then
  version=$(sbatch --version 2> /dev/null | awk '{print $2}')
  if [ -n "$version" ]; then
    say ok "Slurm $version (srun is given --cpus-per-task through SRUN_CPUS_PER_TASK, which 22.05 and later need)"
  else
    fail "sbatch cannot reach its cluster's configuration: run this on the cluster's login or compute node"
  fi
else
  fail "no sbatch on PATH: run this where jobs are submitted"
fi
if command -v scontrol > /dev/null && config=$(scontrol show config 2> /dev/null); then
  gres=$(sed -n 's/^GresTypes *= *//p' <<< "$config")
  case "$gres" in
    *gpu*) say ok "GRES types: $gres (--gpus-per-task=4 asks for GPUs)" ;;
    *) say warn "no gpu GRES type configured (GresTypes: ${gres:-none}): drop --gpus-per-task, or ask the site" ;;
  esac
  cgroup=$(sed -n 's/^TaskPlugin *= *//p' <<< "$config")
  say ok "TaskPlugin: ${cgroup:-none} (the template asks for --mem=0: all of each node's memory)"
fi
template=$(dirname "$0")/search.sbatch
for option in account partition qos; do  # the template's placeholders: a site that asks for one must fill it in
  line=$(grep -E "^#+SBATCH --$option=" "$template" | head -1)
  case "$line" in
    "#SBATCH --$option="*YOUR_*) fail "--$option in $template is still $(sed 's/.*=//' <<< "$line"): fill it in" ;;
    "#SBATCH --$option="*) say ok "--$option: ${line#*=}" ;;
    *) say warn "--$option: a placeholder in $template (${line:-no line}); fill it in where the site asks for one, or pass sbatch --$option=..." ;;
  esac
done
local_root=${SLURM_TMPDIR:-${TMPDIR:-/tmp}}
if [ -d "$local_root" ] && [ -w "$local_root" ]; then
  say ok "node-local scratch: $local_root (Ray's sockets, the SQLite store; ISTAR_TUNE_LOCAL overrides)"
else
  fail "node-local scratch $local_root is not a writable folder: set ISTAR_TUNE_LOCAL"
fi
mkdir -p "$results" 2> /dev/null
if ( : > "$results/.check-site.lock" ) 2> /dev/null; then
  exec 9> "$results/.check-site.lock"
  locked=0
  flock -n -E 75 9 || locked=$?
  mount=$(findmnt -n -o FSTYPE,OPTIONS --target "$results" 2> /dev/null)
  if [ "$locked" = 0 ] && [[ "$mount" == lustre*localflock* ]]; then
    fail "$results is Lustre with localflock: flock holds on one node only, two jobs could share the store; use an MLflow server (MLFLOW_TRACKING_URI) or a mount with -o flock"
  elif [ "$locked" = 0 ]; then
    say ok "flock works on $results (one job's SQLite store at a time)"
  else
    fail "flock does not work on $results (a Lustre mount without -o flock?): use an MLflow server (MLFLOW_TRACKING_URI)"
  fi
  exec 9>&-
  rm -f "$results/.check-site.lock"
else
  fail "cannot write $results: give ISTAR_TUNE_RESULTS a folder on the shared file system"
fi
here=$(dirname "$0")
python=${ISTAR_TUNE_VENV:-.venv}/bin/python
[ -x "$python" ] || python=python3
if problem=$("$python" "$here/site.py" head "$(hostname -s)" 2>&1); then
  say ok "$(hostname -s) resolves to one of this node's addresses (the head check passes here)"
else
  say warn "${problem#istar-tune: } (on a compute node Slurm's NodeAddr is used)"
fi
low_high=$(cat /proc/sys/net/ipv4/ip_local_port_range 2> /dev/null | tr '\t' '-')
say ok "ephemeral ports ${low_high:-unknown}: the job's window is below them ($("$python" "$here/site.py" ports 0)-... for job 0)"
exit "$failed"
