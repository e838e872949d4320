#!/usr/bin/env python3
"""Render the committed chat-template fixtures with transformers itself.

Reads tests/fixtures/chat/conversations.json (templates + conversations), renders every
(template, conversation) pair exactly the way `tokenizer.apply_chat_template(...,
tokenize=False)` does -- transformers' own `_normalize_chat_messages` followed by its own
`render_jinja_template` (sandboxed Jinja environment, trim_blocks/lstrip_blocks, loop
controls, raise_exception, strftime_now, the tojson override) -- and writes
tests/fixtures/chat/expected.json. Nothing is re-implemented here: the reference IS
transformers. A conversation that a template rejects (e.g. Gemma's role-alternation
raise_exception) records the error message and exception type instead of a string.

Usage (needs `pip install transformers jinja2`; torch is not needed):
    .venv/bin/python tools/reference/gen_chat_templates.py [--check]

--check renders and compares against the committed expected.json without writing.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "chat"


def load_transformers():
    try:
        import jinja2
        import transformers
        from transformers.utils import chat_template_utils as ctu
    except ImportError as e:  # pragma: no cover - environment problem
        sys.exit(f"error: {e}; install with: .venv/bin/pip install transformers jinja2")
    for name in ("render_jinja_template", "_normalize_chat_messages"):
        if not hasattr(ctu, name):
            sys.exit(
                f"error: transformers {transformers.__version__} has no chat_template_utils.{name}; "
                "this script follows the apply_chat_template path of transformers >= 5"
            )
    return transformers, jinja2, ctu


def render_one(ctu, source, tokens, conv, common_extra):
    extra = dict(common_extra)
    extra.update(conv.get("extra") or {})
    tools = extra.pop("tools", None)
    documents = extra.pop("documents", None)
    # apply_chat_template: template_kwargs = {**special_tokens_map, **kwargs}
    template_kwargs = {"bos_token": tokens["bos_token"], "eos_token": tokens["eos_token"], **extra}
    messages = ctu._normalize_chat_messages(conv["messages"])
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages],
        tools=tools,
        documents=documents,
        chat_template=source,
        add_generation_prompt=conv.get("add_generation_prompt", False),
        **template_kwargs,
    )
    return rendered[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with expected.json instead of writing it")
    args = ap.parse_args()

    transformers, jinja2, ctu = load_transformers()
    spec = json.loads((FIXTURES / "conversations.json").read_text(encoding="utf-8"))
    common_extra = spec.get("common_extra", {})

    results = {}
    for tname, tinfo in spec["templates"].items():
        source = (FIXTURES / tinfo["file"]).read_text(encoding="utf-8")
        entries = []
        for conv in spec["conversations"]:
            entry = {"conversation": conv["name"]}
            try:
                entry["output"] = render_one(ctu, source, tinfo, conv, common_extra)
            except Exception as e:  # the template rejected the conversation
                entry["error"] = str(e)
                entry["error_type"] = type(e).__name__
            entries.append(entry)
        results[tname] = entries

    doc = {
        "generator": "tools/reference/gen_chat_templates.py",
        "transformers_version": transformers.__version__,
        "jinja2_version": jinja2.__version__,
        "results": results,
    }
    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    out = FIXTURES / "expected.json"
    if args.check:
        old = json.loads(out.read_text(encoding="utf-8"))
        if old["results"] != results:
            sys.exit("expected.json is stale: re-run without --check")
        print("expected.json is up to date")
        return
    out.write_text(text, encoding="utf-8")
    n_ok = sum("output" in e for v in results.values() for e in v)
    n_err = sum("error" in e for v in results.values() for e in v)
    print(f"wrote {out.relative_to(ROOT)}: {len(results)} templates, {n_ok} renders, {n_err} expected errors")


if __name__ == "__main__":
    main()
