#!/usr/bin/env bash
# The off-policy agents' Pendulum curves (issue: SAC, TD3 and DDPG), as run on the lent
# GPU machine's 16 CPU cores by the device tool, after `bash ../shared/device/wheels.sh`:
#   bash bench/gpu_off_policy.sh      (results under $OUT, runs.tar.gz)
# sac, td3 and ddpg on Pendulum-v1, seeds 0-2, 20,000 env steps each, all nine at once,
# each on the CPU with the 2-core machines' actors (--worker_count=2) and one learner
# thread; every other flag the agent's default, except td3's and ddpg's --learning_starts
# (their 25,000, CleanRL's for MuJoCo, is longer than these runs): 5,000 as sac's.
source bench/gpu_setup.sh
mkdir -p /tmp/runs
for agent in sac td3 ddpg; do
  starts=""; [ $agent != sac ] && starts="--learning_starts=5000"
  for seed in 0 1 2; do
    timeout 500 python3 main.py --env=Pendulum-v1 --agent=$agent --seed=$seed --device=cpu $starts \
      --worker_count=2 --learner_threads=1 --environment_max_steps=20000 --status_interval=60 \
      --results_dir=/tmp/runs/${agent}_s$seed > "/tmp/runs/${agent}_s$seed.log" 2>&1 &
  done
done
wait
tar czf "$OUT/runs.tar.gz" -C /tmp runs
ls -la "$OUT"
