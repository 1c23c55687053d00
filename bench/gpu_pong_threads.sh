#!/usr/bin/env bash
# The thread rule for a GPU learner (issue: Pong in a third of Sample Factory's wall time;
# "measure the choice on 2 cores and state the rule for 16"), as run by the device tool
# after `bash ../shared/device/wheels.sh`:   bash bench/gpu_pong_threads.sh   (results in $OUT)
# 1. Pong's defaults trained for $SECS s (default 60) in four cells, actors x learner threads:
#    16 x 16 (the auto values on 16 cores), 16 x 2, 14 x 16, 14 x 2; each cell's frames/s is
#    the median of its status lines' rates after the first 25 s, with the mean policy lag;
# 2. Pong to 18 (bench/learning.py, seed 0, cut at $CUT s, default 240) with the cell of the
#    highest frames/s.
source bench/gpu_setup.sh
SECS=${SECS:-60}
CUT=${CUT:-240}
cell() {  # name workers threads
  python3 main.py --env=PongNoFrameskip-v4 --seed=0 --eval_interval=0 --environment_max_steps=2500000 \
    --results_dir="/tmp/threads_$1" --status_interval=5 --worker_count="$2" --learner_threads="$3" \
    > "$OUT/threads_$1.log" 2>&1 &
  local pid=$!
  sleep "$SECS"; kill -INT $pid; sleep 8; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
}
cell w16_t16 16 16
cell w16_t2 16 2
cell w14_t16 14 16
cell w14_t2 14 2
python3 - "$OUT" > "$OUT/threads.json" <<'PY'
import glob, json, os, re, statistics, sys
out, cells = sys.argv[1], {}
for path in sorted(glob.glob(os.path.join(out, "threads_*.log"))):
    rows = []
    for line in open(path):
        m = re.match(r"(\d+):(\d+):(\d+) frames [\d,]+ .*?\| fps ([\d,]+) .*?\| lag ([\d.]+)", line)
        if m:
            h, mi, s, fps, lag = m.groups()
            rows.append((int(h) * 3600 + int(mi) * 60 + int(s), int(fps.replace(",", "")), float(lag)))
    late = [r for r in rows if rows and r[0] - rows[0][0] >= 25]
    name = os.path.basename(path)[len("threads_"):-len(".log")]
    cells[name] = {"lines": len(late),
                   "fps": statistics.median(r[1] for r in late) if late else None,
                   "lag": round(statistics.mean(r[2] for r in late), 2) if late else None}
best = max((c for c in cells if cells[c]["fps"]), key=lambda c: cells[c]["fps"], default="w16_t16")
print(json.dumps({"cells": cells, "best": best}, indent=1))
PY
cat "$OUT/threads.json"
best=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['best'])" "$OUT/threads.json")
w=${best#w}; w=${w%%_*}; t=${best##*_t}
timeout "$CUT" python3 -m bench.learning --task=pong --frames=6e6 --seeds=0 --results_dir=/tmp/pong \
  --log="$OUT/pong_learning.log" -- --stop_at_return=18 --eval_interval=0 \
  --worker_count="$w" --learner_threads="$t" > "$OUT/pong_learning.json" 2> "$OUT/pong_learning.err"
echo "learning ($best) rc $?" >> "$OUT/pong_learning.err"
tail -3 "$OUT/pong_learning.log"
ls -la "$OUT"
