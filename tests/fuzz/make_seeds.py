#!/usr/bin/env python3
"""tests/fuzz/make_seeds.py OUT — seed corpora for the libFuzzer targets, from the committed fixtures.

OUT/<target>/ gets small valid inputs the fuzzers mutate from: GGUF and safetensors files written
here (every metadata type, tensors of several dtypes), the chat templates of tests/fixtures/chat
with their conversations, OpenAI request bodies of every kind the server takes, and the
tokenizer corpus of tests/fixtures/tokenizer. Idempotent (same names, same bytes).
"""
import json
import pathlib
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def gguf_string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def gguf_file(kvs, tensors, alignment=32) -> bytes:
    """kvs: [(key, type_id, payload bytes)]; tensors: [(name, ggml_type, dims, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, t, payload in kvs:
        out += gguf_string(key.encode()) + struct.pack("<I", t) + payload
    offset = 0
    infos = b""
    for name, gtype, dims, data in tensors:
        infos += gguf_string(name.encode()) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", gtype, offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += infos
    out += b"\0" * ((-len(out)) % alignment)
    for _, _, _, data in tensors:
        out += data + b"\0" * ((-len(data)) % alignment)
    return out


def gguf_seeds():
    u32 = lambda v: struct.pack("<I", v)
    arr = lambda t, items: u32(t) + struct.pack("<Q", len(items)) + b"".join(items)
    kvs = [
        ("general.architecture", 8, gguf_string(b"llama")),
        ("general.name", 8, gguf_string(b"fuzz")),
        ("llama.block_count", 4, u32(2)),
        ("llama.context_length", 10, struct.pack("<Q", 4096)),
        ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        ("llama.attention.layer_norm_rms_epsilon", 12, struct.pack("<d", 1e-5)),
        ("tokenizer.ggml.add_bos_token", 7, b"\x01"),
        ("tokenizer.ggml.tokens", 9, arr(8, [gguf_string(t) for t in (b"<s>", b"</s>", b"a", b"b", b"ab")])),
        ("tokenizer.ggml.scores", 9, arr(6, [struct.pack("<f", -i) for i in range(5)])),
        ("tokenizer.ggml.token_type", 9, arr(5, [struct.pack("<i", 3), struct.pack("<i", 3)] + [struct.pack("<i", 1)] * 3)),
        ("general.alignment", 4, u32(32)),
        ("x.i8", 0, b"\xff"), ("x.u8", 1, b"\x01"), ("x.i16", 3, struct.pack("<h", -2)),
        ("x.u16", 2, struct.pack("<H", 2)), ("x.i64", 11, struct.pack("<q", -7)),
    ]
    f32 = struct.pack("<8f", *range(8))
    f16 = struct.pack("<8e", *range(8))
    q8 = struct.pack("<e", 0.5) + bytes(range(32))  # one Q8_0 block
    tensors = [("a.weight", 0, [8], f32), ("b.weight", 1, [4, 2], f16), ("c.weight", 8, [32], q8)]
    return {"full.gguf": gguf_file(kvs, tensors), "no_tensors.gguf": gguf_file(kvs[:3], []),
            "empty.gguf": gguf_file([], [])}


def safetensors_file(tensors, metadata=None) -> bytes:
    header, data, off = {}, b"", 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    t = [("w", "F32", [2, 3], struct.pack("<6f", *range(6))), ("h", "F16", [4], struct.pack("<4e", 1, 2, 3, 4)),
         ("b", "BF16", [2], b"\x80\x3f\x00\x40"), ("i", "I32", [1], struct.pack("<i", 5))]
    return {"all.safetensors": safetensors_file(t, {"format": "pt", "rank": "8"}),
            "one.safetensors": safetensors_file(t[:1]), "empty.safetensors": safetensors_file([])}


def request_seeds():
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                "parameters": {"type": "object", "properties": {
                                                    "city": {"type": "string", "maxLength": 40}},
                                                    "required": ["city"]}}}]
    bodies = {
        "chat.json": {"model": "m", "messages": [{"role": "system", "content": "Be terse."},
                                                 {"role": "user", "content": "Hi"}],
                      "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "stream": True,
                      "stream_options": {"include_usage": True}, "stop": ["\n\n"], "seed": 3},
        "tools.json": {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"},
                                                  {"role": "assistant", "content": None, "tool_calls": [
                                                      {"id": "c1", "type": "function", "function": {
                                                          "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                                                  {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
                       "tools": tools, "tool_choice": "required", "parallel_tool_calls": True},
        "schema.json": {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "JSON"}]}],
                        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
                        "logprobs": True, "top_logprobs": 2, "logit_bias": {"5": -100}, "n": 1},
        "completion.json": {"model": "m", "prompt": ["a", "b"], "max_tokens": 8, "echo": False, "logprobs": 1,
                            "frequency_penalty": 0.5, "presence_penalty": 0.1, "stop": "x"},
        "tokenize.json": {"model": "m", "prompt": "hello", "add_special_tokens": True},
        "detokenize.json": {"model": "m", "tokens": [1, 2, 3]},
    }
    return {k: json.dumps(v).encode() for k, v in bodies.items()}


def template_seeds():
    conv = json.loads((FIX / "chat" / "conversations.json").read_text())
    out = {}
    for name, info in conv["templates"].items():
        src = (FIX / "chat" / info["file"]).read_bytes()
        out[f"{name}.txt"] = src
        for c in conv["conversations"][:3]:
            out[f"{name}_{c['name']}.txt"] = src + b"\0" + json.dumps(c["messages"]).encode()
    return out


def tokenizer_seeds():
    corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
    return {f"s{i:03d}.txt": s.encode() for i, s in enumerate(corpus["strings"])}


def main():
    out = pathlib.Path(sys.argv[1])
    for target, seeds in {"gguf": gguf_seeds(), "safetensors": safetensors_seeds(), "openai_request": request_seeds(),
                          "chat_template": template_seeds(), "tokenizer": tokenizer_seeds()}.items():
        d = out / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (d / name).write_bytes(data)
        print(f"{target}: {len(seeds)} seeds in {d}")


if __name__ == "__main__":
    main()
