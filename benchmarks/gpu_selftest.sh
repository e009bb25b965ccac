#!/usr/bin/env bash
# The GPU gate, natively on a GPU machine without Docker: one command, from the repository root.
#
#   benchmarks/gpu_selftest.sh [OUT_DIR]        (PYTHON=/path/to/python to pick the interpreter; default python3)
#
# For the machine issue 18 names (one H100, torch 2.11+cu130, nvidia-nccl-cu13, JAX with the CUDA 13 plugin):
# 1. carries trainimg's runtime (builder/runtime, standard library only) onto PYTHONPATH as `trainimg_runtime`;
# 2. for PyTorch and for JAX, writes the labels file a trainimg image would carry (framework, its version, CUDA
#    13.0, and the NCCL/cuDNN versions of the installed nvidia-* wheels) and runs `selftest --nproc-per-node 1`
#    (NCCL refuses two ranks on one GPU), writing OUT_DIR/selftest-<framework>.{json,xml};
# 3. requires every GPU check PASSED, never skipped: gpu (GPUs visible), framework (a CUDA build), nccl
#    (ncclGetVersion >= 2.7), cudnn (cuDNN loads and answers its version) and the NCCL all-reduce (exact sum);
# 4. times the NCCL all-reduce (PyTorch) of 1 MiB, 64 MiB and 1 GiB tensors -> OUT_DIR/allreduce-<bytes>.json
#    (one rank per visible GPU: with one GPU nothing is communicated and no bandwidth is printed, but the device
#    copy of the same bytes is);
# 5. prints the reports. Exit 0 only if all of the above held; without a GPU it fails, saying which check.
# Other checks (hypertune, reduction_server, ...) are reported but do not gate: such a machine is not an image.
# benchmarks/gpu_device.sh runs this first, then the rest of a device run.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/reports/gpu}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
CARRY="$(mktemp -d)"
trap 'rm -rf "$CARRY"' EXIT
ln -s "$ROOT/builder/runtime" "$CARRY/trainimg_runtime"
export PYTHONPATH="$CARRY${PYTHONPATH:+:$PYTHONPATH}"
FAILED=()

echo "== machine"
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "nvidia-smi: not found"
"$PY" -c 'import sys; print("python", sys.version.split()[0], sys.executable)' || { echo "FAIL: no $PY"; exit 1; }

HELPER="$ROOT/benchmarks/gpu_device.py"  # the labels an image would carry, and the gate (standard library)
labels() { "$PY" "$HELPER" labels "$1"; }
gate() { "$PY" "$HELPER" gate "$OUT/selftest-$1.json"; }  # the report, then FAIL: per GPU check not passed

for framework in pytorch jax; do
  echo "== selftest $framework (nproc-per-node 1)"
  labels "$framework" > "$OUT/labels-$framework.json" || { FAILED+=("$framework: labels"); continue; }
  "$PY" -m trainimg_runtime selftest --labels "$OUT/labels-$framework.json" --nproc-per-node 1 \
    --json "$OUT/selftest-$framework.json" --junit "$OUT/selftest-$framework.xml" 2>"$OUT/selftest-$framework.log"
  echo "selftest exit $? (log: $OUT/selftest-$framework.log)"
  if [ ! -s "$OUT/selftest-$framework.json" ]; then
    tail -5 "$OUT/selftest-$framework.log"; FAILED+=("$framework: no report"); continue
  fi
  gate "$framework" || FAILED+=("$framework: GPU checks")
done

echo "== NCCL all-reduce time (pytorch, every visible GPU)"
for bytes in 1048576 67108864 1073741824; do
  if "$PY" -m trainimg_runtime allreduce --framework pytorch --backend nccl --benchmark-bytes "$bytes" --iters 20 \
      > "$OUT/allreduce-$bytes.json" 2>"$OUT/allreduce-$bytes.log" && grep -q '"ok": true' "$OUT/allreduce-$bytes.json"; then
    cat "$OUT/allreduce-$bytes.json"
  else
    tail -3 "$OUT/allreduce-$bytes.log"; FAILED+=("all-reduce timing $bytes bytes")
  fi
done

if [ ${#FAILED[@]} -gt 0 ]; then
  printf 'GPU GATE FAILED: %s\n' "${FAILED[@]}"
  exit 1
fi
echo "GPU GATE PASSED: every GPU check passed for pytorch and jax; reports in $OUT"
