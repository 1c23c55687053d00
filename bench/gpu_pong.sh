#!/usr/bin/env bash
# Pong on the lent GPU machine (issue: Pong in a third of Sample Factory's wall time; its
# GPU goal: 18 within 60 s on the 16-core H100 box), as run by the device tool after
# `bash ../shared/device/wheels.sh`:   bash bench/gpu_pong.sh      (results under $OUT)
# 1. Pong to 18 with the defaults (16 actors x 4 envs, the learner on cuda:0), seed 0,
#    bench/learning.py, cut at 300 s; 2. the learner's step on cuda:0, fp32 against bf16;
# 3. bench/throughput.py on the 16 cores: raw envs, actor inference, learner, training.
source bench/gpu_setup.sh
timeout 300 python3 -m bench.learning --task=pong --frames=6e6 --seeds=0 --results_dir=/tmp/pong \
  --log="$OUT/pong_learning.log" -- --stop_at_return=18 --eval_interval=0 \
  > "$OUT/pong_learning.json" 2> "$OUT/pong_learning.err"
echo "learning rc $?" >> "$OUT/pong_learning.err"
find /tmp/pong -name "*.csv" -o -name "*.png" -o -name "*.log" -o -name "*.json" | while read -r f; do
  mkdir -p "$OUT/pong_run/$(dirname "${f#/tmp/pong/}")"; cp "$f" "$OUT/pong_run/${f#/tmp/pong/}"; done
timeout 60 python3 -m bench.learner_step --device=cuda:0 --variants=fp32,bf16 --repeats=5 --updates=5 \
  > "$OUT/learner_step_cuda.json" 2> "$OUT/learner_step_cuda.err"
timeout 150 python3 -m bench.throughput --env=PongNoFrameskip-v4 --steps=100000 --seconds=10 \
  > "$OUT/throughput.json" 2> "$OUT/throughput.err"
echo "throughput rc $?" >> "$OUT/throughput.err"
ls -laR "$OUT" | head -60
