#!/bin/bash
# Session 26: s22p.sh with 57,000,000-byte pieces (.gpu/q00..q14 of the same concatenation of
# SmolLM2 + Gemma 3 + Qwen2.5-Coder-0.5B; cut-models.sh cuts them the same): 15 calls instead of
# 23. Each call carries one .gpu/qNN, with tests/fixtures/hybrid moved aside for the staging calls
# (its 18.6 MB would push the call past 64 MiB): `mv tests/fixtures/hybrid .gpu/fixtures-hybrid`
# before the first, `mv .gpu/fixtures-hybrid tests/fixtures/hybrid` after the last (gpu-check
# needs it). Never commit in between.
mkdir -p /root/stage/m && cp .gpu/q*/* /root/stage/m/ 2>/dev/null; ls /root/stage/m | wc -l
