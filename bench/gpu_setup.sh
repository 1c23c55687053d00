# Sourced by the bench/gpu_*.sh scripts on the lent GPU machine (after
# `bash ../shared/device/wheels.sh` here and carry=[".whl"]): installs the carried wheels
# into /tmp/site, puts them and the repository on PYTHONPATH, makes $OUT (default
# /tmp/out) and writes what the machine is to $OUT/machine.txt.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,memory.total --format=csv; lscpu | grep "Model name"; nproc;
  python3 -c "import torch; print('torch', torch.__version__)"; } > "$OUT/machine.txt" 2>&1
