#!/usr/bin/env bash
# The data-parallel learners' GPU checks (issue: several learners for one policy), as run
# on the lent GPU machine by the device tool, after `bash ../shared/device/wheels.sh`:
#   bash bench/gpu_data_parallel.sh      (results under $OUT)
# 1. the equivalence test with gloo on cuda:0 tensors; 2. a 1-rank NCCL group; 3. learner
# updates/s for N=1 and N=2 sharing the GPU (gloo), Pong's and CartPole's nets.
source bench/gpu_setup.sh
DP_DEVICE=cuda:0 timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_data_parallel.py \
  > "$OUT/equivalence_cuda.txt" 2>&1
echo "equivalence rc $?" >> "$OUT/equivalence_cuda.txt"
for args in "--net=pong --ranks=1 --backend=nccl" "--net=pong --ranks=1" "--net=pong --ranks=2" \
            "--net=cartpole --ranks=1 --backend=nccl" "--net=cartpole --ranks=1" \
            "--net=cartpole --ranks=2"; do
  name=$(echo "$args" | tr -d ' -' | tr '=' '_')
  timeout 120 python3 -m bench.data_parallel $args --device=cuda:0 --updates=10 \
    > "$OUT/$name.json" 2> "$OUT/$name.err"
done
ls -la "$OUT"
