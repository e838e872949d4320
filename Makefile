# hindsight — the front door. `make run` and `make test` each set up everything they need.
#   make setup   Debian packages, .venv, default models (idempotent; fast when done)
#   make build   configure + build the CPU preset → build/bin/hindsight
#   make test    setup + build + unit tests (ctest) + Python tests (pytest: tests/py, and
#                tests/e2e against a real `hindsight serve` on SmolLM2)
#   make run     setup + build + serve SmolLM2 (OpenAI-compatible, port 8080) and print a curl line
#   make bench   setup + build + benchmarks
#   make bench-serve  setup + build + serving benchmark (aiperf) and prefill fairness
#   make asan    build + unit tests under AddressSanitizer/UBSan (preset asan)
#   make cuda    configure + build the CUDA preset (compiles on a machine without a GPU)
JOBS ?= $(shell nproc)
PRESET ?= cpu
BIN := build/bin/hindsight
SMOLLM2 := models/smollm2-135m-instruct-q4_1.gguf
GEMMA3 := models/gemma-3-270m-q4_k_m.gguf
# The binary the e2e tests and bench/serve.sh start (override to test another build).
export HS_BIN ?= $(CURDIR)/$(BIN)

.PHONY: setup build test unit pytest e2e run bench bench-serve asan cuda clean sketches

setup:
	scripts/setup

build:
	@test -f build/build.ninja || cmake --preset $(PRESET)
	cmake --build build -j $(JOBS)

unit: build
	cd build && ctest --output-on-failure -j $(JOBS)

pytest: build
	HS_UNIT_TESTS=$(CURDIR)/build/bin/hs_unit_tests .venv/bin/python -m pytest -q tests/py tests/e2e

# Only the end-to-end server tests (no build: uses $(HS_BIN) as it is).
e2e:
	.venv/bin/python -m pytest -q tests/e2e

test: setup
	$(MAKE) unit pytest

# Sketch bases for sparse attention (hindsight fit-sketch), one beside each default model,
# fitted once from source code the setup installed (not the needle-eval haystack); query-aware
# (the best rank-r bilinear approximation of q·k: higher attention-mass recall than PCA,
# docs/sparse-attention.md).
SKETCH_CORPUS := /usr/include/httplib.h /usr/include/nlohmann/json.hpp
sketches: build
	@for m in $(SMOLLM2) $(GEMMA3); do s=$${m%.gguf}.sketch.safetensors; \
	  test -f $$s || $(BIN) fit-sketch -m $$m --corpus $(SKETCH_CORPUS) --max-tokens 32768 --query-aware -o $$s || exit 1; done

PORT ?= 8080
run: setup build sketches
	@echo "Serving SmolLM2 on http://127.0.0.1:$(PORT)/v1 — try, from another shell:"
	@echo "  curl http://127.0.0.1:$(PORT)/v1/chat/completions -H 'Content-Type: application/json' -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":64}'"
	$(BIN) serve -m $(SMOLLM2) --port $(PORT)

bench: setup build
	$(BIN) bench -m $(SMOLLM2)
	$(BIN) bench -m $(GEMMA3)
	build/bin/hs_bench_matmul --benchmark_min_time=0.2

bench-serve: setup build
	bench/serve.sh $(SMOLLM2)
	bench/serve.sh fairness $(SMOLLM2)

asan:
	@test -f build/asan/build.ninja || cmake --preset asan
	cmake --build build/asan -j $(JOBS)
	# Golden, EngineModel and SparseDecoder tests (real model forward passes) are left to the Release run: under ASan at -O0
	# they take many minutes and exercise no parsing or bounds logic that the other tests do not.
	cd build/asan && ctest --output-on-failure -j $(JOBS) -E "Golden|EngineModel|SparseDecoder"

# nvcc from PATH, else the toolkit's default place (CI machines may not have it on PATH).
cuda: export CUDACXX ?= $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
cuda:
	@test -f build/cuda/build.ninja || cmake --preset cuda
	cmake --build build/cuda -j $(JOBS)

clean:
	rm -rf build
