#!/bin/bash
cp ${HS_SMOL:-.gpu}/s0/smol.00 /root/stage/m/; cat /root/peer-setup.log | tail -3
