#!/usr/bin/env bash
# The e2e throughput bench of two versions, interleaved: CORES (default "2 16"; N or NtT as in
# pinned_suites.py) x 3 rounds x (old, new),
# 3 repeats each, pinned with taskset; prints the pooled median ratio per version. Run from the repo
# root, with the old version's package and bench unpacked into _old/:
#   git archive <old commit> trtverify bench/e2e_throughput.py | tar -x -C _old
# (on the GPU host: carry _old and .whl). Per-run results go to /tmp/ab, the summary to $OUT/ab_summary.txt.
export CORES=${CORES:-"2 16"}
export OUT=${OUT:-bench/.cache/ab}
mkdir -p "$OUT"
set -u
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
rm -rf /tmp/ab
trap 'rm -f suites/_dev*_fashion.yaml suites/_dev*_shapes.yaml' EXIT
python3 bench/pinned_suites.py $CORES || exit 1
for cfg in $CORES; do n=${cfg%%t*}; for r in 1 2 3; do for v in old new; do
  b=bench/e2e_throughput.py; [ $v = old ] && b=_old/bench/e2e_throughput.py
  taskset -c 0-$((n-1)) python3 $b --repeat 3 --suite $PWD/suites/_dev${cfg}_shapes.yaml --suite $PWD/suites/_dev${cfg}_fashion.yaml --results /tmp/ab/n${cfg}_${v}_r$r > /dev/null 2>&1 || echo fail $v
done; done; done
python3 - <<'PY'
import json, glob, statistics, collections, os
acc = collections.defaultdict(list); walls = collections.defaultdict(list); raws = collections.defaultdict(list)
for f in sorted(glob.glob("/tmp/ab/*/e2e_throughput.json")):
    n, v, r = f.split("/")[-2].split("_")
    for row in json.load(open(f))["rows"]:
        acc[(n, row["suite"], v)] += row["ratios"]; walls[(n, row["suite"], v)].append(row["stage_wall_s"]); raws[(n, row["suite"], v)].append(row["raw_inference_s"])
out = []
for k in sorted(acc):
    rs = sorted(acc[k]); q = statistics.quantiles(rs, n=4)
    line = "%s %s %s: %d ratios, median %.3f (IQR %.3f-%.3f); stage wall %s; raw %s" % (*k, len(rs), statistics.median(rs), q[0], q[2], [round(w, 3) for w in walls[k]], [round(w, 3) for w in raws[k]])
    print(line); out.append(line)
open(os.environ["OUT"] + "/ab_summary.txt", "w").write("\n".join(out) + "\n")
PY
