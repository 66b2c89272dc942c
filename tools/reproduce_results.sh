#!/bin/bash
# Every number bench/RESULTS.md keeps for one GPU, into OUT: the full bench (every table, DeepGEMM's FP8
# kernels beside each row when a DeepGEMM tree is given: built in place by tools/build_deepgemm.sh), its JSON and
# plot named for the GPU and the tree, the indexer step, the quantizers, the GPU tests, DeepGEMM's own test at its
# own sizes through the adapter (tests/runtime/test_deepgemm_port.py) and memcheck. Each step
# logs to OUT and the next runs even if it failed; the exit status says whether all passed. STEPS (names, comma-
# separated) runs some of them, e.g. on a machine lent in calls of a few minutes each.
#   usage: [STEPS=bench,...] tools/reproduce_results.sh OUT [DEEPGEMM_TREE]
set -uo pipefail
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: [STEPS=bench,...] tools/reproduce_results.sh OUT [DEEPGEMM_TREE]" >&2; exit 2; }
out=$1
peer=${2:-}
all_steps="bench indexer quantize gpu_tests deepgemm_test memcheck"
steps=" ${STEPS:-$all_steps} "
steps=${steps//,/ }
for s in $steps; do
  [[ " $all_steps " == *" $s "* ]] || { echo "reproduce_results: STEPS: expected names among: $all_steps; found $s" >&2; exit 2; }
done
wanted() { [[ $steps == *" $1 "* ]]; }
cd "$(dirname "$0")/.."
py=${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
if ! "$py" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "reproduce_results: no CUDA device visible to $py (torch.cuda.is_available() is false): these numbers are a GPU's" >&2
  exit 2
fi
mkdir -p "$out"
failed=()
# step NAME COMMAND...: COMMAND's output into OUT/NAME.log, its status remembered; a step STEPS could name but
# does not is skipped
step() {
  local name=$1
  shift
  [[ " $all_steps " == *" $name "* ]] && ! wanted "$name" && return 0
  echo "== $name: $*"
  "$@" >"$out/$name.log" 2>&1 || { echo "   failed (rc $?): $out/$name.log"; failed+=("$name"); return 1; }
}
bench_peer=()
if [[ -n $peer ]] && wanted bench; then  # the bench's peer columns
  step deepgemm_build tools/build_deepgemm.sh "$peer" && export PYTHONPATH="$(realpath "$peer")${PYTHONPATH:+:$PYTHONPATH}"
  bench_peer=(--peer deepgemm)
fi
gpu=$("$py" -c "import torch; n = torch.cuda.get_device_name().lower(); print(next((g for g in ('h200', 'h100') if g in n), n.split()[-1]))")
tree=$(git rev-parse --short HEAD 2>/dev/null || echo tree)
tables=$("$py" -c "from mxlogits.bench.shapes import TABLES; print(','.join(TABLES))")  # every table, deepgemm_* too
step bench "$py" -m mxlogits bench "${bench_peer[@]}" --tables "$tables" --json "$out/$gpu-$tree.json" --plot "$out/$gpu-$tree.png"
step indexer "$py" -m mxlogits.bench.indexer
step quantize "$py" tools/quantize_timing.py
step gpu_tests "$py" -m pytest -q -m gpu -p no:cacheprovider
step deepgemm_test env MXLOGITS_DEEPGEMM_SIZES=full "$py" -m pytest -q -p no:cacheprovider tests/runtime/test_deepgemm_port.py
step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$py" tools/memcheck_cases.py
if ((${#failed[@]})); then
  echo "reproduce_results: failed: ${failed[*]} (logs in $out)" >&2
  exit 1
fi
echo "reproduce_results: all steps passed ($(echo $steps))"
if wanted bench; then
  echo "$out/$gpu-$tree.json and .png are the page's JSON and plot"
fi
