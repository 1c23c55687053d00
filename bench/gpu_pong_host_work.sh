#!/usr/bin/env bash
# Pong on the lent GPU machine after the learner's host work per update was cut (issue: Pong
# in a third of Sample Factory's wall time; GPU goal 18 within 60 s). Three changes: ppo's
# statistics stay on the GPU until the update ends (one read-back, not 7 per minibatch
# step), the weights are flattened on the GPU and published in one copy, and the rows a
# receipt folds into the input statistics go to the GPU through pinned buffers. Run by the
# device tool after `bash ../shared/device/wheels.sh py-spy==0.4.1`, with the commit before
# the change unpacked into $BEFORE (default .before; carry it and .whl):
#   bash bench/gpu_pong_host_work.sh   (results in $OUT)
# 1. the tests that have a GPU case; 2. the learner step alone, before and after, on the
# defaults' batch (T=128 x 32, 4 minibatches) and the short rollouts' (T=32 x 128, 16
# minibatches), two processes of each in turns; 3. Pong to 18 with the short rollouts'
# flags (the fastest run so far: 167.8 s), seed 0, cut at $CUT s (default 220), with top
# and 20 s of py-spy on the main process 60 s in; 4. the tree before for $BEFORE_S s
# (default 90) with the same flags: its frames/s against the first 90 s of step 3's.
source bench/gpu_setup.sh
BEFORE=${BEFORE:-.before}
CUT=${CUT:-220}
FLAGS=(--r_f_steps=32 --batch_size=128 --ppo_minibatches=16)
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_normalize.py tests/test_ppo.py \
  tests/test_optimizers.py > "$OUT/tests.txt" 2>&1
tail -3 "$OUT/tests.txt"
for round in 1 2; do
  for tree in "$BEFORE" .; do
    for batch in "" "${FLAGS[*]}"; do
      # shellcheck disable=SC2086  # the batch's flags are words
      (cd "$tree" && PYTHONPATH=/tmp/site:$PWD timeout 60 python3 -m bench.learner_step \
        --device=cuda:0 --variants=fp32 --repeats=3 --updates=2 $batch) \
        | sed "s|^|{\"tree\": \"$tree\", \"round\": $round, \"r\": |; s|\$|}|" >> "$OUT/learner_step.jsonl"
    done
  done
done
cat "$OUT/learner_step.jsonl"
pong() {  # name tree seconds
  local name=$1 tree=$2 secs=$3
  # its own process group, so that the cut stops main.py and its actors too
  (cd "$tree" && PYTHONPATH=/tmp/site:$PWD exec setsid python3 -m bench.learning --task=pong \
    --frames=6e6 --seeds=0 --results_dir="/tmp/pong_$name" -- --stop_at_return=18 \
    --eval_interval=0 "${FLAGS[@]}" > "$OUT/$name.log" 2>&1) &
  local pid=$!
  if [ "$name" = after ]; then
    ( sleep 60; top -b -n 1 -w 180 | head -40 > "$OUT/top_after.txt"
      main=$(pgrep -f "main.py.*pong_after" | head -1)
      timeout 30 /tmp/site/bin/py-spy record --nonblocking -r 100 -d 20 -f raw \
        -o "$OUT/pyspy_after.txt" --pid "$main" > /dev/null 2>&1 ) &
  fi
  ( sleep "$secs"; kill -TERM -- "-$pid" ) 2>/dev/null &
  local cutter=$!
  wait "$pid"
  echo "rc $?" >> "$OUT/$name.log"
  kill "$cutter" 2>/dev/null; sleep 8; kill -9 -- "-$pid" 2>/dev/null
  { head -1 /tmp/pong_"$name"/*/learner.csv; tail -3 /tmp/pong_"$name"/*/learner.csv; } \
    >> "$OUT/$name.log"
  grep -E "frames .*fps" "$OUT/$name.log" | tail -2
}
pong after . "$CUT"
pong before "$BEFORE" "${BEFORE_S:-90}"
ls -la "$OUT"
