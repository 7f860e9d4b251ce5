#!/usr/bin/env bash
# Submit a search to a Ray cluster as a job.
#
#   jobs/submit.sh SPACE.yaml [istar-tune search flags...]
#
# Environment:
#   RAY_ADDRESS          the cluster's job server, e.g. http://127.0.0.1:8265 (default) or your head's dashboard
#   MLFLOW_TRACKING_URI  an MLflow server every node can reach, e.g. http://mlflow.internal:5000 (required)
#   STORAGE_PATH         Ray results on storage every node can reach, e.g. s3://bucket/istar-runs or /mnt/shared
#                        (default: /tmp/istar-runs on the head, fine for a one-node cluster)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: jobs/submit.sh SPACE.yaml [istar-tune search flags...]" >&2
  exit 2
fi
: "${MLFLOW_TRACKING_URI:?set MLFLOW_TRACKING_URI to an MLflow server the cluster can reach (http://host:port)}"
space=$1
shift
exec ray job submit \
  --address "${RAY_ADDRESS:-http://127.0.0.1:8265}" \
  --runtime-env jobs/runtime_env.yaml \
  --working-dir . \
  -- istar-tune search "$space" \
     --tracking-uri "$MLFLOW_TRACKING_URI" \
     --storage-path "${STORAGE_PATH:-/tmp/istar-runs}" \
     "$@"
