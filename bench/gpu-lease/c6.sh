#!/bin/bash
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs/hindsight
$H serve --device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -c 131072 --max-num-seqs 64 --max-num-batched-tokens 2048 --port 8080 > $OUT/serve.log 2>&1 &
for i in $(seq 1 120); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/health')" 2>/dev/null && break; sleep 1; done
timeout 400 python3 bench/serve_load.py --url http://127.0.0.1:8080 --concurrency 1,8,32,64 --isl 512 --osl 128 --requests-per-level 2 --json $OUT/serve_load.json 2>&1 | tail -12
kill %1; sleep 1; grep -E "step-cost|error" $OUT/serve.log | head -5
