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
# 4. times the NCCL all-reduce (PyTorch) of 1 MiB, 64 MiB and 1 GiB tensors -> OUT_DIR/allreduce-<bytes>.json;
# 5. prints the reports. Exit 0 only if all of the above held; without a GPU it fails, saying which check.
# Other checks (hypertune, reduction_server, ...) are reported but do not gate: such a machine is not an image.
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

labels() {  # $1 framework -> the labels JSON an image of it would carry, from what is installed here
  "$PY" - "$1" <<'EOF'
import importlib.metadata as md, json, sys
framework = sys.argv[1]
def version(*names):
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            pass
    return None
labels = {"trainimg.framework": framework, "trainimg.variant": f"{framework}-native-gpu",
          "trainimg.recipe.python": "%d.%d" % sys.version_info[:2], "trainimg.recipe.cuda": "13.0",
          "trainimg.reduction-server": "none"}
found = {"framework": version("torch") if framework == "pytorch" else version("jax"),
         "nccl": version("nvidia-nccl-cu13"), "cudnn": version("nvidia-cudnn-cu13")}
labels.update({f"trainimg.recipe.{k}": v for k, v in found.items() if v})
print(json.dumps(labels, sort_keys=True))
EOF
}

gate() {  # $1 framework: every GPU check passed (prints why not)
  "$PY" - "$OUT/selftest-$1.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
checks = {c["name"]: c for c in report["suites"][0]["checks"]}
nccl_runs = [c for n, c in checks.items() if n.startswith("allreduce_nccl")]
wanted = [checks.get(n, {"name": n, "status": "missing", "reason": ""}) for n in ("gpu", "framework", "nccl", "cudnn")]
wanted += nccl_runs or [{"name": "allreduce_nccl", "status": "missing", "reason": "no NCCL all-reduce ran"}]
bad = [c for c in wanted if c["status"] != "passed"]
for c in checks.values():
    print(f"  {c['status']:<8} {c['name']:<28} {c['reason']}")
for c in bad:
    print(f"FAIL: {c['name']} {c['status']}: {c['reason']}")
sys.exit(1 if bad else 0)
EOF
}

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
