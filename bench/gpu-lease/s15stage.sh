#!/bin/bash
# Session 15, call 1: unpack the carried CUDA bundle (.gpu/bundle) and stage SmolLM2's first part
# (.gpu/p00) into /root/stage.
mkdir -p /root/stage/m && tar xzf .gpu/bundle/bins.tgz -C /root/stage && cp .gpu/p*/* /root/stage/m/ 2>/dev/null
ls /root/stage/hs /root/stage/m | tr '\n' ' '; echo
