#!/usr/bin/env bash
# The whole GPU device run in one command, on a GPU machine without Docker or network (what the device tool lends:
# one H100, Python 3.12 with torch+cu130 and jax 0.11.2 with the CUDA 13 plugin), from the repository root:
#
#   benchmarks/gpu_device.sh [OUT_DIR]     (default: $OUT/gpu-device where $OUT is set, else reports/gpu-device)
#   DRY_RUN=1 benchmarks/gpu_device.sh     (print every step's command and check, run nothing)
#   PYTHON=/path/to/python3, BUDGET_S=290 (seconds for the whole run; a step never starts past it)
#
# It repeats the first device run (benchmarks/results/2026-11-26-h100) with today's expectations, carrying
# builder/runtime onto PYTHONPATH as `trainimg_runtime` (nothing else of the project is needed there):
#  1. benchmarks/gpu_selftest.sh: selftest for PyTorch and JAX (every GPU check passed) and the all-reduce
#     benchmark of 1 MiB, 64 MiB and 1 GiB (one rank: nothing communicated; the device copy of the same bytes);
#  2. selftest --platform P --nproc-per-node auto for the ten emulated platforms (NCCL all-reduce passed);
#  3. the `spec --conformance` form: launch --platform vertex -- selftest --cluster under a Vertex CLUSTER_SPEC;
#  4. a user's DDP program (the recorded platforms/train_ddp.py) under launch --nproc-per-node auto;
#  5. the misuse cases, now refused up front with one line naming both numbers (one process more than the GPUs:
#     selftest PyTorch and JAX, launch), CUDA_VISIBLE_DEVICES=-1 (the gpu check and the all-reduce agree: 0
#     visible, gloo), and both frameworks installed without --framework (refused: pass --framework);
#  6. shared memory: selftest of two local ranks with a 64 MiB /dev/shm (a tmpfs mounted over it in a mount
#     namespace of its own, `unshare -rm`) is refused up front with the cause (the shm check failed, no rank
#     started), and with 2 GiB passes (over gloo where the machine has one GPU: two NCCL ranks need two).
# Each step's output goes to OUT_DIR; each step's verdict (benchmarks/gpu_device.py check ...) to steps.tsv, and
# all of them to summary.json. Exit 0 only if every step showed what it must.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-${OUT:+$OUT/gpu-device}}"
DEST="${DEST:-$ROOT/reports/gpu-device}"
PY="${PYTHON:-python3}"
HELPER="$ROOT/benchmarks/gpu_device.py"
DDP="$ROOT/benchmarks/results/2026-11-26-h100/platforms/train_ddp.py"
PLATFORMS=(vertex aiplatform uai slurm trainjob pytorchjob tfjob azureml mpi jaxjob)
BUDGET="${BUDGET_S:-290}"
DRY="${DRY_RUN:-}"
START=$SECONDS
STEP_RC=0
STEP_S=0
STEP_SKIPPED=

CARRY="$(mktemp -d)"
trap 'rm -rf "$CARRY"' EXIT
ln -s "$ROOT/builder/runtime" "$CARRY/trainimg_runtime"
export PYTHONPATH="$CARRY${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$DEST/platforms" "$DEST/misuse" "$DEST/shm"
: > "$DEST/steps.tsv"

run() {  # LOG LIMIT CMD...: run CMD (output to LOG) within LIMIT seconds and what is left of the budget
  local log="$1" limit="$2" left began
  shift 2
  if [ -n "$DRY" ]; then
    printf '+ %s > %s\n' "$*" "$log"
    STEP_RC=0 STEP_S=0
    return
  fi
  left=$(( BUDGET - (SECONDS - START) ))
  if [ "$left" -lt 5 ]; then
    echo "not started: the run's budget of ${BUDGET}s is spent" > "$log"
    STEP_RC=124 STEP_S=0 STEP_SKIPPED=1
    return
  fi
  STEP_SKIPPED=
  [ "$limit" -gt "$left" ] && limit="$left"
  began=$SECONDS
  timeout "$limit" "$@" > "$log" 2>&1
  STEP_RC=$?
  STEP_S=$(( SECONDS - began ))
}

judge() {  # NAME CHECK ARGS...: record what `gpu_device.py check CHECK ARGS...` says of the last step
  local name="$1" line
  shift
  if [ -n "$DRY" ]; then
    printf '  check %s: %s\n' "$name" "$*"
    return
  fi
  if [ -n "$STEP_SKIPPED" ]; then
    line="FAIL"$'\t'"not started: the run's budget of ${BUDGET}s was spent"
  else
    line="$("$PY" "$HELPER" check "$@" 2>&1 | head -n 1)"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "${line%%$'\t'*}" "$STEP_S" "${line#*$'\t'}" >> "$DEST/steps.tsv"
  printf '%-28s %s\n' "$name" "${line/$'\t'/ }"
  STEP_S=0  # a step judged twice counts its time once
}

echo "== machine"
if [ -z "$DRY" ]; then
  { nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; } \
    > "$DEST/machine.txt" 2>&1
  "$PY" "$HELPER" versions > "$DEST/versions.txt" 2>&1
  cat "$DEST/machine.txt" "$DEST/versions.txt"
  GPUS="$("$PY" -c 'import os; from trainimg_runtime.gpus import gpu_view; print(gpu_view(os.environ).visible)')"
else
  GPUS=1
fi
MORE=$(( GPUS + 1 ))
echo "GPUs CUDA sees: $GPUS"

echo "== 1. gpu_selftest.sh: selftest (PyTorch, JAX) and the all-reduce benchmark"
run "$DEST/gpu_selftest.out" 200 bash "$ROOT/benchmarks/gpu_selftest.sh" "$DEST/selftest"
LABELS="$DEST/selftest/labels"
judge selftest-pytorch gate "$DEST/selftest/selftest-pytorch.json"
judge selftest-jax gate "$DEST/selftest/selftest-jax.json"
judge allreduce-bench bench "$DEST"/selftest/allreduce-*.json

echo "== 2. selftest --platform P --nproc-per-node auto"
for p in "${PLATFORMS[@]}"; do
  fw=pytorch
  [ "$p" = jaxjob ] && fw=jax
  run "$DEST/platforms/selftest-$p.log" 60 "$PY" -m trainimg_runtime selftest --platform "$p" \
    --nproc-per-node auto --labels "$LABELS-$fw.json" --framework "$fw" --timeout 50 \
    --json "$DEST/platforms/selftest-$p.json"
  judge "platform-$p" gate "$DEST/platforms/selftest-$p.json"
done

SPEC='{"cluster":{"workerpool0":["127.0.0.1:29517"]},"environment":"cloud","task":{"type":"workerpool0","index":0}}'
echo "== 3. spec --conformance: selftest --cluster under the launcher (Vertex CLUSTER_SPEC, one replica)"
run "$DEST/platforms/cluster-vertex-launch.log" 90 env CLUSTER_SPEC="$SPEC" "$PY" -m trainimg_runtime launch \
  --platform vertex --nproc-per-node auto -- "$PY" -m trainimg_runtime selftest --cluster \
  --labels "$LABELS-pytorch.json"
judge cluster-vertex cluster "$DEST/platforms/cluster-vertex-launch.log"

echo "== 4. a user's DDP program under the launcher"
run "$DEST/platforms/user-ddp-under-launch.log" 90 env CLUSTER_SPEC="$SPEC" "$PY" -m trainimg_runtime launch \
  --platform vertex --nproc-per-node auto -- "$PY" "$DDP"
judge user-ddp line "$DEST/platforms/user-ddp-under-launch.log" "^DDP ok rank 0 of $GPUS "

echo "== 5. misuse: refused up front, or counted the way CUDA counts"
for fw in pytorch jax; do
  run "$DEST/misuse/$fw-nproc$MORE.log" 60 "$PY" -m trainimg_runtime selftest --platform vertex \
    --nproc-per-node "$MORE" --labels "$LABELS-$fw.json" --framework "$fw" --timeout 50 \
    --json "$DEST/misuse/$fw-nproc$MORE.json"
  judge "misuse-selftest-$fw" refused "$STEP_RC" "$DEST/misuse/$fw-nproc$MORE.log" "$MORE" "$GPUS"
done
run "$DEST/misuse/launch-nproc$MORE.log" 60 env CLUSTER_SPEC="$SPEC" "$PY" -m trainimg_runtime launch \
  --platform vertex --nproc-per-node "$MORE" --framework pytorch -- "$PY" "$DDP"
judge misuse-launch refused "$STEP_RC" "$DEST/misuse/launch-nproc$MORE.log" "$MORE" "$GPUS"
run "$DEST/misuse/cuda-visible-devices-hidden.log" 120 env CUDA_VISIBLE_DEVICES=-1 "$PY" -m trainimg_runtime \
  selftest --platform vertex --labels "$LABELS-pytorch.json" --framework pytorch --timeout 90 \
  --json "$DEST/misuse/cuda-visible-devices-hidden.json"
judge misuse-hidden-gpus hidden "$DEST/misuse/cuda-visible-devices-hidden.json"
run "$DEST/misuse/launch-two-frameworks.log" 30 "$PY" -m trainimg_runtime launch --nproc-per-node 2 -- true
judge misuse-two-frameworks line "$DEST/misuse/launch-two-frameworks.log" "pass --framework to say which"

echo "== 6. shared memory: two local ranks with 64 MiB of /dev/shm (refused up front) and with 2 GiB (passed)"
HIDE=()
[ "$GPUS" -lt 2 ] && HIDE=(CUDA_VISIBLE_DEVICES=)  # two NCCL ranks need two GPUs: gloo on a one-GPU machine
# shellcheck disable=SC2016  # $1 and $@ are the inner shell's: the size, then the command
WITH_SHM='mount -t tmpfs -o "size=$1" tmpfs /dev/shm && shift && exec "$@"'
for size in 64m 2g; do
  run "$DEST/shm/selftest-$size.log" 90 env "${HIDE[@]}" unshare -rm sh -c "$WITH_SHM" shm "$size" \
    "$PY" -m trainimg_runtime selftest --platform vertex --nproc-per-node 2 --labels "$LABELS-pytorch.json" \
    --framework pytorch --timeout 60 --json "$DEST/shm/selftest-$size.json"
done
judge shm-too-small shm refused "$DEST/shm/selftest-64m.json"
judge shm-enough shm passed "$DEST/shm/selftest-2g.json"

echo "== summary ($(( SECONDS - START ))s)"
[ -n "$DRY" ] && exit 0
"$PY" "$HELPER" summary "$DEST"
