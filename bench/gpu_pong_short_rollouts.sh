#!/usr/bin/env bash
# Pong to 18 on the lent GPU machine with shorter rollouts (issue: Pong in a third of Sample
# Factory's wall time; GPU goal 18 within 60 s). On 16 cores the defaults' 64 envs x T=128
# keep about 16k env steps in flight, 8 batches' worth (2 cores: 1), and Pong took 4.6M frames
# to 18 there against 2.2M on 2 cores. T=32 keeps 2k in flight. Run by the device tool after
# `bash ../shared/device/wheels.sh`:   bash bench/gpu_pong_short_rollouts.sh   (results in $OUT)
# The cells named in $CELLS (default: all three; the device's 600-s limit a call fits two),
# seed 0, each cut at $CUT s (default 200), bench/learning.py:
#   t32_b32:     --r_f_steps=32 --batch_size=32 (1,024 env steps an update in 4 minibatches,
#                the defaults' update);
#   t32_b128:    --r_f_steps=32 --batch_size=128 --ppo_minibatches=16 (4,096 in 16 of 256);
#   t32_b128_e2: the same in 8 minibatches and 2 epochs (half the learner's arithmetic).
source bench/gpu_setup.sh
CUT=${CUT:-200}
cell() {  # name, then main.py flags
  local name=$1; shift
  # its own process group, so that the cut stops main.py and its actors too
  setsid python3 -m bench.learning --task=pong --frames=6e6 --seeds=0 \
    --results_dir="/tmp/pong_$name" --log="$OUT/$name.log" -- --stop_at_return=18 \
    --eval_interval=0 "$@" > "$OUT/$name.json" 2> "$OUT/$name.err" &
  local pid=$!
  ( sleep "$CUT"; kill -TERM -- "-$pid" ) 2>/dev/null &
  local cutter=$!
  wait "$pid"
  echo "$name rc $?" >> "$OUT/$name.err"
  kill "$cutter" 2>/dev/null; sleep 8; kill -9 -- "-$pid" 2>/dev/null
  cp /tmp/pong_"$name"/*/episodes.csv "$OUT/${name}_episodes.csv"  # flat: few files return
  tail -2 "$OUT/$name.log"
}
for c in ${CELLS:-t32_b32 t32_b128 t32_b128_e2}; do
  case $c in
    t32_b32) cell "$c" --r_f_steps=32 --batch_size=32 ;;
    t32_b128) cell "$c" --r_f_steps=32 --batch_size=128 --ppo_minibatches=16 ;;
    t32_b128_e2) cell "$c" --r_f_steps=32 --batch_size=128 --ppo_minibatches=8 --ppo_epochs=2 ;;
    *) echo "unknown cell $c" >&2; exit 2 ;;
  esac
done
ls -la "$OUT"
