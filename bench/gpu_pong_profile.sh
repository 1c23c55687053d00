#!/usr/bin/env bash
# Where Pong's training time goes on the lent GPU machine (after bench/gpu_pong.sh found it
# learner-bound: a policy lag of 15 updates at 19.5k frames/s), as run by the device tool
# after `bash ../shared/device/wheels.sh py-spy==0.4.1`:   bash bench/gpu_pong_profile.sh
# 1. the defaults (16 actors x 4 envs, --learner_threads 16): top, and py-spy on the main
#    process for 25 s; 2. 14 actors and --learner_threads=2; 3. the raw envs and the actors'
#    inference alone on 16 processes (bench/throughput.py's parts).
source bench/gpu_setup.sh
train() {  # name seconds flags...
  local name=$1 secs=$2; shift 2
  python3 main.py --env=PongNoFrameskip-v4 --seed=0 --eval_interval=0 --environment_max_steps=2500000 \
    --results_dir=/tmp/prof_$name --status_interval=5 "$@" > "$OUT/$name.log" 2>&1 &
  local pid=$!
  if [ "$name" = defaults ]; then
    sleep 45; top -b -n 1 -w 180 | head -45 > "$OUT/top_$name.txt"
    timeout 40 /tmp/site/bin/py-spy record -r 100 -d 25 -f raw --threads -o "$OUT/pyspy_$name.txt" \
      --pid $pid > "$OUT/pyspy_$name.err" 2>&1
    sleep $((secs - 75))
  else
    sleep "$secs"
  fi
  kill -INT $pid; sleep 5; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
}
train defaults 90
train w14_lt2 70 --worker_count=14 --learner_threads=2
timeout 90 python3 -c '
import json
from bench.throughput import env_ceiling_fps, inference_fps
from option_flags import default_values
from training.config import make_config
from wrappers.envs import env_info
cfg, errors = make_config(default_values(env="PongNoFrameskip-v4"))
info = env_info(cfg.env, cfg.env_options())
print(json.dumps({"workers": cfg.worker_count, "envs_per_worker": cfg.envs_per_worker,
                  "env_ceiling_fps": round(env_ceiling_fps(cfg, info, 8.0)),
                  "inference_fps": round(inference_fps(cfg, info, 8.0))}))
' > "$OUT/parts.json" 2>&1
ls -la "$OUT"
