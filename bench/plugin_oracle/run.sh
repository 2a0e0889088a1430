#!/bin/bash
# device side: run each oracle binary on its cases, pack the outputs
cd "$(dirname "$0")"
mkdir -p outs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for f in cases/*.bin; do
  n=$(basename $f .bin); kind=${n%%_*}
  case $kind in enms) bin=./enms;; bnms) bin=./bnms;; mmd) bin=mmd/mmd;; roi) bin=./roi;; esac
  $bin $f outs/$n.out || echo "FAILED $n"
done
tar czf "$OUT/outs.tgz" outs
ls outs | wc -l
