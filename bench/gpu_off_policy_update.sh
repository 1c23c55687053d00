#!/usr/bin/env bash
# The off-policy learner's step on the lent machine (after `bash ../shared/device/wheels.sh`):
#   bash bench/gpu_off_policy_update.sh      (JSON lines under $OUT)
# sac and td3, fused twin critics against separate ones, on the H200 and on its CPU
# cores (1 and 2 threads: what a 2-core machine's learner has, without the actors).
source bench/gpu_setup.sh
for agent in sac td3; do
  for where in "--device=cuda" "--device=cpu --threads=1" "--device=cpu --threads=2"; do
    timeout 120 python3 -m bench.off_policy_update --agent=$agent $where >> "$OUT/update.jsonl" \
      2>> "$OUT/update.err"
  done
done
cat "$OUT/update.jsonl"
