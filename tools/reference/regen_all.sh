#!/usr/bin/env bash
# tools/reference/regen_all.sh — regenerate every committed fixture from its reference
# (Hugging Face transformers / tokenizers, the gguf package), in one command.
# Installs the heavy reference stack (torch, transformers) on demand into .venv-ref.
# Needs the default models: run scripts/setup first.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x .venv-ref/bin/python ]; then python3 -m venv .venv-ref; fi
if ! cmp -s tools/reference/requirements.txt .venv-ref/.req-stamp; then
  .venv-ref/bin/pip install -q -r tools/reference/requirements.txt
  cp tools/reference/requirements.txt .venv-ref/.req-stamp
fi
PY=.venv-ref/bin/python
set -x
$PY tools/reference/gen_quant_fixtures.py
$PY tools/reference/gen_tokenizer_fixtures.py
$PY tools/reference/fetch_chat_templates.py
$PY tools/reference/gen_chat_templates.py
$PY tools/reference/gen_golden_logits.py
$PY tools/reference/gen_hybrid_golden.py
$PY tools/reference/gen_hybrid_gguf.py
