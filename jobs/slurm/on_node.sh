#!/usr/bin/env bash
# One node's part of jobs/slurm/search.sbatch (srun runs it once per node): Ray on this node through
# `ray symmetric-run` (Ray 2.60.0), and on the head node `istar-tune search ARGS --address HEAD:PORT` as well.
set -euo pipefail
: "${ISTAR_TUNE_HEAD:?run by jobs/slurm/search.sbatch}"
on_head=0
if [ "${SLURMD_NODENAME:-$(hostname -s)}" = "$ISTAR_TUNE_HEAD_NODE" ]; then on_head=1; fi
mps=0
ended() {  # on the head, however this ends: its status, for the batch script (on this node) to see at once that the
  # head's part is over, the search started or not (a failed head would leave the other nodes waiting for it)
  local code=$?
  if [ "$mps" = 1 ]; then echo quit | nvidia-cuda-mps-control || true; fi
  if [ "$on_head" = 1 ]; then echo "$code" > "$ISTAR_TUNE_HEAD_ENDED"; fi
}
trap ended EXIT
mkdir -p "$RAY_TMPDIR"
if [ "${ISTAR_TUNE_MPS:-0}" = 1 ]; then  # NVIDIA's MPS, this job's own daemon on this node
  export CUDA_MPS_PIPE_DIRECTORY=$ISTAR_TUNE_LOCAL_ROOT/mps-pipe CUDA_MPS_LOG_DIRECTORY=$ISTAR_TUNE_LOCAL_ROOT/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  mps=1
fi
# The GPUs Slurm gave this task, as many as it made visible (without a GPU request Ray counts the node's own).
gpus=()
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  gpus=(--num-gpus "$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c .)")
fi
base=$ISTAR_TUNE_PORT_BASE
python jobs/slurm/site.py free "$base"  # a port of the window taken on this node: one line, before Ray starts
# A SIGUSR1 sent to the job's step (`scancel --signal=USR1` without --batch, or `--signal=USR1@...` without B:) reaches
# every process here, not the batch script: Ray's processes ignore it (started with it ignored), and the head's part
# passes it on to the batch script, which stops the search and requeues the job as for its own SIGUSR1.
relay() {
  if [ "$on_head" = 1 ] && [ -n "${ISTAR_TUNE_BATCH_PID:-}" ]; then kill -USR1 "$ISTAR_TUNE_BATCH_PID" 2> /dev/null || true; fi
  return 0
}
trap relay USR1
(trap '' USR1; exec ray symmetric-run --address "$ISTAR_TUNE_HEAD" --min-nodes "${SLURM_JOB_NUM_NODES:-1}" \
  --num-cpus "${SLURM_CPUS_PER_TASK:-$(nproc)}" ${gpus[@]+"${gpus[@]}"} \
  --dashboard-port $((base + 8)) \
  --ray-client-server-port $((base + 1)) --dashboard-agent-listen-port $((base + 2)) \
  --dashboard-agent-grpc-port $((base + 3)) --metrics-export-port $((base + 4)) --runtime-env-agent-port $((base + 5)) \
  --node-manager-port $((base + 6)) --object-manager-port $((base + 7)) \
  --min-worker-port $((base + 20)) --max-worker-port $((base + 199)) \
  -- bash -c 'echo $$ > "$ISTAR_TUNE_DRIVER_PID"; exec istar-tune search "$@" --address "$ISTAR_TUNE_HEAD"' \
  istar-tune "$@") &
ray_part=$!
while :; do  # a relayed signal interrupts the wait, not Ray's part (a zombie still answers kill -0: waited again)
  code=0
  wait "$ray_part" || code=$?
  if ! kill -0 "$ray_part" 2> /dev/null; then break; fi
done
if [ "$code" != 0 ]; then status=$code; fi
if [ "$on_head" = 1 ]; then
  exit "${status:-0}"  # the search's own exit status, as symmetric-run passes it on
fi
# A worker's Ray ends when the head's does, with an error of its own (it lost the head): the job's status is the
# search's, so a worker ends with 0 (one that cannot join fails the head's wait for every node instead).
if [ -n "${status:-}" ]; then echo "istar-tune: Ray on ${SLURMD_NODENAME:-$(hostname -s)} ended ($status) after the head's"; fi
