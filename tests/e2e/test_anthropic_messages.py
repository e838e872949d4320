"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) through the official
`anthropic` client.

On SmolLM2 (the session `server` of conftest.py): plain messages, system prompts, stop
sequences, prefill, streaming with `client.messages.stream`, count_tokens, the 400s and the
401. On Qwen2.5-Coder-0.5B (one server for the module, skipped when the model is absent): a
forced tool_use whose input validates against its input_schema, the tool_result sent back,
and tools streamed. Greedy decoding (temperature 0, sent through extra_body: this SDK
version has no temperature argument).
"""
from __future__ import annotations

import json

import pytest

anthropic = pytest.importorskip("anthropic")

from conftest import API_KEY, MODEL_NAME  # noqa: E402
from hs_server import http  # noqa: E402

GREEDY = {"temperature": 0}
HELLO = [{"role": "user", "content": "Write one sentence about the sea."}]


@pytest.fixture(scope="module")
def aclient(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0, timeout=120)


def _prompt_tokens(usage) -> int:
    """input_tokens excludes what the prefix cache served (Anthropic's split)."""
    return usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)


def test_plain_message(aclient):
    r = aclient.messages.create(model=MODEL_NAME, max_tokens=24, messages=HELLO, extra_body=GREEDY)
    assert r.type == "message" and r.role == "assistant" and r.model == MODEL_NAME
    assert r.id.startswith("msg_")
    assert len(r.content) == 1 and r.content[0].type == "text" and r.content[0].text.strip()
    assert r.stop_reason in ("end_turn", "max_tokens"), r
    assert r.stop_sequence is None
    assert 1 <= r.usage.output_tokens <= 24
    if r.stop_reason == "max_tokens":
        assert r.usage.output_tokens == 24
    assert r.usage.cache_creation_input_tokens == 0
    counted = aclient.messages.count_tokens(model=MODEL_NAME, messages=HELLO)
    assert _prompt_tokens(r.usage) == counted.input_tokens > 5
    # The same prompt again: the prefix cache serves part of it, and input_tokens is the rest.
    r2 = aclient.messages.create(model=MODEL_NAME, max_tokens=4, messages=HELLO, extra_body=GREEDY)
    assert _prompt_tokens(r2.usage) == counted.input_tokens
    assert r2.usage.cache_read_input_tokens > 0, r2.usage


def test_system_prompt(aclient):
    system = "You are a pirate. Answer every question like a pirate would."
    as_text = aclient.messages.count_tokens(model=MODEL_NAME, messages=HELLO, system=system)
    as_blocks = aclient.messages.count_tokens(model=MODEL_NAME, messages=HELLO,
                                              system=[{"type": "text", "text": system}])
    bare = aclient.messages.count_tokens(model=MODEL_NAME, messages=HELLO)
    assert as_text.input_tokens == as_blocks.input_tokens
    # SmolLM2's template puts a default system prompt in when none is given; ours replaces it.
    assert as_text.input_tokens != bare.input_tokens
    r = aclient.messages.create(model=MODEL_NAME, max_tokens=16, system=system, messages=HELLO, extra_body=GREEDY)
    assert r.content and r.content[0].text.strip()
    assert _prompt_tokens(r.usage) == as_text.input_tokens


def test_stop_sequences(aclient):
    r = aclient.messages.create(model=MODEL_NAME, max_tokens=24, messages=HELLO, extra_body=GREEDY)
    text = r.content[0].text
    words = text.split()
    assert len(words) >= 3, text
    stop = " " + words[1]  # early in the answer, so greedy decoding reaches it again
    assert stop in text
    r2 = aclient.messages.create(model=MODEL_NAME, max_tokens=24, messages=HELLO, stop_sequences=["zzqx", stop],
                                 extra_body=GREEDY)
    assert r2.stop_reason == "stop_sequence", r2
    assert r2.stop_sequence == stop
    got = r2.content[0].text if r2.content else ""
    assert got == text[:text.index(stop)]
    # Streamed: message_delta carries the same.
    with aclient.messages.stream(model=MODEL_NAME, max_tokens=24, messages=HELLO, stop_sequences=[stop],
                                 extra_body=GREEDY) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop


def test_prefill_continues_the_assistant_message(aclient):
    messages = HELLO + [{"role": "assistant", "content": "The sea is"}]
    r = aclient.messages.create(model=MODEL_NAME, max_tokens=12, messages=messages, extra_body=GREEDY)
    assert r.content and r.content[0].text
    assert not r.content[0].text.startswith("The sea is")  # the answer continues it
    with_prefill = aclient.messages.count_tokens(model=MODEL_NAME, messages=messages)
    without = aclient.messages.count_tokens(model=MODEL_NAME, messages=HELLO)
    assert with_prefill.input_tokens == _prompt_tokens(r.usage)
    assert 1 <= with_prefill.input_tokens - without.input_tokens <= 4


def test_streaming_matches_the_deltas(aclient):
    types, deltas = [], []
    with aclient.messages.stream(model=MODEL_NAME, max_tokens=32, messages=HELLO, extra_body=GREEDY) as s:
        for ev in s:
            types.append(ev.type)
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                deltas.append(ev.delta.text)
        final = s.get_final_message()
    raw = [t for t in types if t not in ("text",)]  # the helper's own per-delta "text" events
    assert raw[0] == "message_start" and raw[1] == "content_block_start"
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"], raw
    assert len(deltas) >= 2
    assert final.id.startswith("msg_") and final.model == MODEL_NAME
    assert len(final.content) == 1 and final.content[0].type == "text"
    assert final.content[0].text == "".join(deltas)
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert 1 <= final.usage.output_tokens <= 32
    counted = aclient.messages.count_tokens(model=MODEL_NAME, messages=HELLO)
    assert _prompt_tokens(final.usage) == counted.input_tokens
    # The same greedy request, not streamed, gives the same text.
    r = aclient.messages.create(model=MODEL_NAME, max_tokens=32, messages=HELLO, extra_body=GREEDY)
    assert r.content[0].text == final.content[0].text


def test_raw_sse_framing_and_x_api_key(server):
    body = {"model": MODEL_NAME, "max_tokens": 4, "messages": HELLO, "stream": True}
    status, headers, raw = http("POST", server.base_url + "/v1/messages", body,
                                headers={"x-api-key": API_KEY, "anthropic-version": "2023-06-01"})
    assert status == 200, raw
    assert headers.get("Content-Type", "").startswith("text/event-stream")
    assert headers.get("request-id")
    events = [e for e in raw.decode().split("\n\n") if e]
    for e in events:
        name, data = e.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == name[7:]
    assert events[0].startswith("event: message_start") and events[-1].startswith("event: message_stop")


@pytest.mark.parametrize("case", ["missing max_tokens", "image block", "unknown role", "system role", "thinking",
                                  "bad tool_result id"])
def test_bad_requests_are_400s(aclient, case):
    kw = {"model": MODEL_NAME, "max_tokens": 8, "messages": HELLO}
    field = {
        "missing max_tokens": "max_tokens",
        "image block": "messages[0].content[1].type",
        "unknown role": "messages[0].role",
        "system role": "messages[0].role",
        "thinking": "thinking",
        "bad tool_result id": "messages[0].content[0].tool_use_id",
    }[case]
    if case == "missing max_tokens":
        kw["extra_body"] = {"max_tokens": None}  # the SDK insists on the argument; null is absent
    elif case == "image block":
        kw["messages"] = [{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]
    elif case == "unknown role":
        kw["messages"] = [{"role": "robot", "content": "hi"}]
    elif case == "system role":
        kw["messages"] = [{"role": "system", "content": "be nice"}, *HELLO]
    elif case == "thinking":
        kw["thinking"] = {"type": "enabled", "budget_tokens": 2048}
    elif case == "bad tool_result id":
        kw["messages"] = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x",
                                                        "content": "42"}]}]
    with pytest.raises(anthropic.BadRequestError) as ei:
        aclient.messages.create(**kw)
    err = ei.value
    assert err.status_code == 400
    assert err.body["type"] == "error" and err.body["error"]["type"] == "invalid_request_error", err.body
    assert field in err.body["error"]["message"], err.body


def test_wrong_key_and_unknown_model(server, aclient):
    bad = anthropic.Anthropic(base_url=server.base_url, api_key="wrong-key", max_retries=0, timeout=30)
    with pytest.raises(anthropic.AuthenticationError) as ei:
        bad.messages.create(model=MODEL_NAME, max_tokens=8, messages=HELLO)
    assert ei.value.body["error"]["type"] == "authentication_error"
    status, _, raw = http("POST", server.base_url + "/v1/messages",
                          {"model": MODEL_NAME, "max_tokens": 4, "messages": HELLO}, headers={"x-api-key": "nope"})
    assert status == 401 and json.loads(raw)["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.NotFoundError) as ei:
        aclient.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=HELLO)
    assert ei.value.body["error"]["type"] == "not_found_error"


# ---- tools on Qwen2.5-Coder-0.5B ----

WEATHER = {"name": "get_weather", "description": "Get the current weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                            "required": ["city"]}}
TIME = {"name": "get_time", "description": "Get the current time in a time zone",
        "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]


@pytest.fixture(scope="module")
def qclient(qwen):
    return anthropic.Anthropic(base_url=qwen.base_url, api_key=API_KEY, max_retries=0, timeout=120)


def test_forced_tool_use_round_trip(qclient):
    jsonschema = pytest.importorskip("jsonschema")
    r = qclient.messages.create(model="qwen-e2e", max_tokens=64, messages=ASK, tools=[WEATHER, TIME],
                                tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
    assert r.stop_reason == "tool_use", r
    assert r.stop_sequence is None
    uses = [b for b in r.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather", r.content
    assert uses[0].id.startswith("toolu_")
    jsonschema.validate(uses[0].input, WEATHER["input_schema"])
    assert uses[0].input["city"].lower() == "paris"
    # The assistant turn goes back as the SDK returned it, then the tool's result.
    messages = ASK + [{"role": "assistant", "content": r.content},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                    "content": "18 degrees Celsius and sunny"}]}]
    r2 = qclient.messages.create(model="qwen-e2e", max_tokens=48, messages=messages, tools=[WEATHER, TIME],
                                 extra_body=GREEDY)
    assert r2.stop_reason in ("end_turn", "max_tokens", "tool_use"), r2
    assert r2.content, r2
    for b in r2.content:
        assert b.type in ("text", "tool_use")
        if b.type == "text":
            assert b.text
        else:
            assert b.name in ("get_weather", "get_time") and isinstance(b.input, dict)
    # The prompt grew by the call and the result.
    assert _prompt_tokens(r2.usage) >= _prompt_tokens(r.usage) + r.usage.output_tokens + 8, (r.usage, r2.usage)
    counted = qclient.messages.count_tokens(model="qwen-e2e", messages=messages, tools=[WEATHER, TIME])
    assert counted.input_tokens == _prompt_tokens(r2.usage)


def test_tool_use_streamed(qclient):
    jsonschema = pytest.importorskip("jsonschema")
    partial = []
    with qclient.messages.stream(model="qwen-e2e", max_tokens=64, messages=ASK, tools=[WEATHER, TIME],
                                 tool_choice={"type": "any"}, extra_body=GREEDY) as s:
        for ev in s:
            if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
                partial.append(ev.delta.partial_json)
        final = s.get_final_message()
    assert final.stop_reason == "tool_use", final
    uses = [b for b in final.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name in ("get_weather", "get_time"), final.content
    assert uses[0].id.startswith("toolu_")
    schema = WEATHER if uses[0].name == "get_weather" else TIME
    jsonschema.validate(uses[0].input, schema["input_schema"])
    assert json.loads("".join(partial)) == uses[0].input


def test_auto_tool_choice_and_none(qclient):
    r = qclient.messages.create(model="qwen-e2e", max_tokens=64, messages=ASK, tools=[WEATHER], extra_body=GREEDY)
    assert r.stop_reason in ("tool_use", "end_turn", "max_tokens")
    if r.stop_reason == "tool_use":
        assert any(b.type == "tool_use" and b.name == "get_weather" for b in r.content)
    r = qclient.messages.create(model="qwen-e2e", max_tokens=16, messages=ASK, tools=[WEATHER],
                                tool_choice={"type": "none"}, extra_body=GREEDY)
    assert all(b.type == "text" for b in r.content)
    assert r.stop_reason in ("end_turn", "max_tokens")
