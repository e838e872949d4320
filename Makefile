# hindsight — the front door. `make run` and `make test` each set up everything they need.
#   make setup   Debian packages, .venv, default models (idempotent; fast when done)
#   make build   configure + build the CPU preset → build/bin/hindsight
#   make test    setup + build + unit tests (ctest) + Python tests (pytest: tests/py, and
#                tests/e2e against a real `hindsight serve` on SmolLM2)
#   make run     setup + build + serve Qwen2.5-Coder-0.5B-Instruct (OpenAI-compatible, port 8080) and
#                print a curl line; MODEL=path/to.gguf serves another (any model under models/)
#   make models-extra  also fetch Qwen2.5-Coder-1.5B-Instruct (1.1 GB; not needed by the tests)
#   make bench   setup + build + benchmarks
#   make bench-serve  setup + build + serving benchmark (aiperf) and prefill fairness
#   make asan    build + unit tests under AddressSanitizer/UBSan (preset asan; only hs_unit_tests)
#   make cuda    configure + build the CUDA preset (compiles on a machine without a GPU): the two
#                binaries scripts/gpu-check and scripts/gpu-bundle use, hindsight and hs_unit_tests
JOBS ?= $(shell nproc)
PRESET ?= cpu
BIN := build/bin/hindsight
SMOLLM2 := models/smollm2-135m-instruct-q4_1.gguf
GEMMA3 := models/gemma-3-270m-q4_k_m.gguf
QWEN05B := models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
QWEN15B := models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
# The model `make run` serves (the e2e tests keep SmolLM2: CI time).
MODEL ?= $(QWEN05B)
# The binary the e2e tests and bench/serve.sh start (override to test another build).
export HS_BIN ?= $(CURDIR)/$(BIN)

.PHONY: setup build test unit pytest e2e run bench bench-serve asan fuzz cuda clean sketches models-extra

setup:
	scripts/setup

# The 1.5B coding model, on request (sha256-checked like the default models).
models-extra:
	scripts/setup --extra-models

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

# Sketch bases for sparse attention (hindsight fit-sketch), one beside each default model and
# the served MODEL, fitted once from source code the setup installed (not the needle-eval
# haystack); query-aware (the best rank-r bilinear approximation of q·k: higher attention-mass
# recall than PCA, docs/sparse-attention.md).
SKETCH_CORPUS := /usr/include/httplib.h /usr/include/nlohmann/json.hpp
sketches: build
	@for m in $(sort $(SMOLLM2) $(GEMMA3) $(QWEN05B) $(MODEL)); do s=$${m%.gguf}.sketch.safetensors; \
	  test -f $$m || { echo "$$m is absent (make models-extra fetches the 1.5B)"; exit 1; }; \
	  test -f $$s || $(BIN) fit-sketch -m $$m --corpus $(SKETCH_CORPUS) --max-tokens 32768 --query-aware -o $$s || exit 1; done

PORT ?= 8080
run: setup build sketches
	@echo "Serving $(notdir $(MODEL)) on http://127.0.0.1:$(PORT)/v1 — try, from another shell:"
	@echo "  curl http://127.0.0.1:$(PORT)/v1/chat/completions -H 'Content-Type: application/json' -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":64}'"
	$(BIN) serve -m $(MODEL) --port $(PORT)

bench: setup build
	$(BIN) bench -m $(SMOLLM2)
	$(BIN) bench -m $(GEMMA3)
	build/bin/hs_bench_matmul --benchmark_min_time=0.2

bench-serve: setup build
	bench/serve.sh $(SMOLLM2)
	bench/serve.sh fairness $(SMOLLM2)

asan:
	@test -f build/asan/build.ninja || cmake --preset asan
	cmake --build build/asan -j $(JOBS) --target hs_unit_tests
	# Golden, EngineModel, SparseDecoder and SparseHybrid tests (real model forward passes) are left to the Release run: under ASan at -O0
	# they take many minutes and exercise no parsing or bounds logic that the other tests do not.
	cd build/asan && ctest --output-on-failure -j $(JOBS) -E "Golden|EngineModel|SparseDecoder|SparseHybrid"

# libFuzzer targets (tests/fuzz, clang + ASan + UBSan): build, seed from the fixtures, replay the
# regression inputs, then fuzz each target for FUZZ_SECONDS (CI: the default, a short run;
# docs/fuzzing.md records the long ones). A crash leaves its input in build/fuzz/crashes/.
FUZZ_SECONDS ?= 20
FUZZ_TARGETS := gguf safetensors openai_request chat_template tokenizer
fuzz: setup
	@test -f build/fuzz/build.ninja || CXX=clang++ cmake -S tests/fuzz -B build/fuzz -G Ninja
	cmake --build build/fuzz -j $(JOBS)
	.venv/bin/python tests/fuzz/make_seeds.py build/fuzz/seeds >/dev/null
	@mkdir -p build/fuzz/crashes
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus/$$t; \
	  if [ -d tests/fuzz/regressions/$$t ]; then build/fuzz/bin/fuzz_$$t tests/fuzz/regressions/$$t/* >/dev/null 2>&1 \
	    || { echo "fuzz_$$t: a regression input fails"; exit 1; }; fi; \
	  build/fuzz/bin/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=build/fuzz/crashes/$$t- \
	    build/fuzz/corpus/$$t build/fuzz/seeds/$$t > build/fuzz/$$t.log 2>&1 \
	    || { tail -n 40 build/fuzz/$$t.log; echo "fuzz_$$t: crashed (input in build/fuzz/crashes/)"; exit 1; }; \
	  echo "fuzz_$$t: $$(grep -o 'Done [0-9]* runs in [0-9]* second' build/fuzz/$$t.log), no crash"; \
	done

# nvcc from PATH, else the toolkit's default place (CI machines may not have it on PATH).
cuda: export CUDACXX ?= $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
cuda:
	@test -f build/cuda/build.ninja || cmake --preset cuda
	cmake --build build/cuda -j $(JOBS) --target hindsight hs_unit_tests

clean:
	rm -rf build
