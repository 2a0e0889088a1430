#!/usr/bin/env bash
# e2e throughput bench pinned to 2, 4 and 16 cores (ORT intra-op threads to match); run from the repo root.
# Needs trtverify importable (PYTHONPATH=.) and its dependencies; on the GPU host the missing wheels came
# from .whl/ (see the device tool notes). Results go to $OUT/n<cores>/ (OUT defaults to bench/.cache/pinned).
set -u
trap 'rm -f suites/_dev*_fashion.yaml suites/_dev*_shapes.yaml' EXIT   # the pinned suite copies live beside the originals (relative paths)
[ -d .whl ] && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1; }
OUT=${OUT:-bench/.cache/pinned}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; python3 -c "import onnxruntime, numpy; print('ort', onnxruntime.__version__, 'numpy', numpy.__version__)"
python3 bench/pinned_suites.py 2 4 16 || exit 1
for n in 2 4 16; do
  c="0-$((n-1))"
  echo "== $n cores ($c)"
  taskset -c $c python3 bench/e2e_throughput.py --repeat 9 --suite suites/_dev${n}_fashion.yaml --suite suites/_dev${n}_shapes.yaml --results $OUT/n$n 2>&1 | grep -v "^.*: run " 
done
