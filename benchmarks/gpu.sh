#!/usr/bin/env bash
# The GPU figures in one run (benchmarks/gpu.py): scoring vs the forward ceiling, naive scoring and
# generate; update samples/s at the 135M and 1.7B shapes; end-to-end training decisions/s.
# Random weights of the right shapes: nothing is downloaded. Prints a table, writes results/gpu.json.
#
#   benchmarks/gpu.sh                        # on a lent GPU (cuda, bf16)
#   benchmarks/gpu.sh --device cpu --quick   # a tiny shape on the CPU, to check the script
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" benchmarks/gpu.py "$@"
