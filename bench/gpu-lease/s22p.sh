#!/bin/bash
# Session 22: stage one carried part (.gpu/pNN: 38,000,000-byte pieces of SmolLM2 + Gemma 3 +
# Qwen2.5-Coder-0.5B concatenated) into /root/stage/m.
mkdir -p /root/stage/m && cp .gpu/p*/* /root/stage/m/ 2>/dev/null; ls /root/stage/m | wc -l; tail -2 /root/peerout/setup.log
