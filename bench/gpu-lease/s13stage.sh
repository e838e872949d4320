#!/bin/bash
# Session 13: stage one model part (.gpu/pNN, carried) into /root/stage/m.
mkdir -p /root/stage/m && cp .gpu/p*/* /root/stage/m/ 2>/dev/null; ls /root/stage/m | tr '\n' ' '; echo
