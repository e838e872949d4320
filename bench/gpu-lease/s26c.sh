#!/bin/bash
# Next lease (after s26a.sh unpacked the bundle): issue 14 point 7, an agent's follow-up on a
# 256K cached context. `serve` on the 8B shape, int4 KV in the host tier, sketch-sparse decode;
# bench/followup_ttft.py sends the context once (its prefill: the staged flash path), then
# follow-ups of the same context + a 100-token question: TTFT and cached_tokens each.
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs/hindsight
$B serve --device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 --kv-tier host \
  --kv-cache-dtype int4 --device-kv-budget 4294967296 --sparse sketch --sketch random -c 300000 --max-model-len 280000 \
  --max-num-batched-tokens 8192 --request-timeout 0 --port 8091 > $OUT/serve.log 2>&1 &
SRV=$!
for i in $(seq 1 60); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8091/v1/models')" 2>/dev/null && break; sleep 2; done
date -u +"%F %T UTC"
timeout 120 python3 bench/followup_ttft.py --url http://127.0.0.1:8091 --context 32768 --followups 2 --seed 2 \
  --json $OUT/fu32k.json; echo "32K rc $?"
timeout 420 python3 bench/followup_ttft.py --url http://127.0.0.1:8091 --context 262144 --followups 3 --seed 3 \
  --timeout 400 --json $OUT/fu256k.json; echo "256K rc $?"
date -u +"%F %T UTC"
kill $SRV; wait $SRV 2>/dev/null
grep -iE "error|warn" $OUT/serve.log | head -10
