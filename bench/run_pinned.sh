#!/usr/bin/env bash
# e2e throughput bench pinned to 2, 4 and 16 cores (ORT intra-op threads to match), and to 16 cores with
# 8 ORT threads (the other cores free for reading and post-processing, as when inference runs on an
# accelerator); CONFIGS overrides the list (N or NtT, see pinned_suites.py). Run from the repo root.
# Needs trtverify importable (PYTHONPATH=.) and its dependencies; on the GPU host the missing wheels came
# from .whl/ (see the device tool notes). Results go to $OUT/n<cores>/ (OUT defaults to bench/.cache/pinned).
set -u
trap 'rm -f suites/_dev*_fashion.yaml suites/_dev*_shapes.yaml' EXIT   # the pinned suite copies live beside the originals (relative paths)
[ -d .whl ] && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1; }
OUT=${OUT:-bench/.cache/pinned}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; python3 -c "import onnxruntime, numpy; print('ort', onnxruntime.__version__, 'numpy', numpy.__version__)"
CONFIGS=${CONFIGS:-"2 4 16 16t8"}
python3 bench/pinned_suites.py $CONFIGS || exit 1
for cfg in $CONFIGS; do
  n=${cfg%%t*}; c="0-$((n-1))"
  echo "== $cfg: $n cores ($c)"
  taskset -c $c python3 bench/e2e_throughput.py --repeat ${REPEAT:-15} --suite suites/_dev${cfg}_fashion.yaml --suite suites/_dev${cfg}_shapes.yaml --results $OUT/n$cfg 2>&1 | grep -v "^.*: run " 
done
