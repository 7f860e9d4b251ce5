#!/usr/bin/env bash
# Submit a search (or several, run as one experiment) to a Ray cluster as a job.
#
#   jobs/submit.sh SPACE [SPACE ...] [istar-tune search flags...]
#   e.g. jobs/submit.sh paper_base paper_cosreg paper_istar paper_seeds --models bert
#
# Environment:
#   RAY_ADDRESS          the cluster's job server, e.g. http://127.0.0.1:8265 (default; `ray dashboard` forwards it)
#   RAY_AUTH_MODE=token  with jobs/cluster.yaml: the job server asks for the token in ~/.ray/auth_token
#   MLFLOW_TRACKING_URI  the MLflow server the job's driver (on the head) writes to, e.g. http://127.0.0.1:5000
#                        (jobs/cluster.yaml's, on the head's loopback) (required)
#   STORAGE_PATH         Ray results on storage every node can reach, e.g. s3://bucket/istar-runs or /mnt/shared
#                        (default: the head's ISTAR_TUNE_STORAGE_PATH, set in jobs/cluster.yaml; without it,
#                        istar-runs in the job's working folder on the head: a one-node cluster only)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: jobs/submit.sh SPACE [SPACE ...] [istar-tune search flags...]" >&2
  exit 2
fi
: "${MLFLOW_TRACKING_URI:?set MLFLOW_TRACKING_URI to an MLflow server the cluster can reach (http://host:port)}"
# Without STORAGE_PATH, istar-tune on the head reads its own $ISTAR_TUNE_STORAGE_PATH (jobs/cluster.yaml sets it).
storage=()
if [ -n "${STORAGE_PATH:-}" ]; then
  storage=(--storage-path "$STORAGE_PATH")
fi
exec ray job submit \
  --address "${RAY_ADDRESS:-http://127.0.0.1:8265}" \
  --runtime-env jobs/runtime_env.yaml \
  --working-dir . \
  -- istar-tune search "$@" \
     --tracking-uri "$MLFLOW_TRACKING_URI" \
     ${storage[@]+"${storage[@]}"}
