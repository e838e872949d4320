"""OpenAI's Responses API (POST /v1/responses) through the official `openai` client and the
OpenAI Agents SDK.

On SmolLM2 (the session `server` of conftest.py): `client.responses.create` with a string
input (the same prompt, tokens and greedy text as the chat route), max_output_tokens and the
incomplete status, instructions, message items, streaming (raw events with increasing
sequence numbers, and the `client.responses.stream` helper: the text deltas equal the final
output_text), text.format json_schema validated with jsonschema, the 400s naming the
unsupported fields, and the 404 for a stored response. On Qwen2.5-Coder-0.5B (one server for
the module, skipped when the model is absent): a forced function call whose arguments validate
against the tool's parameters, its function_call_output sent back, calls streamed, and an
`agents.Agent` with one `@function_tool` run through OpenAIResponsesModel (non-streamed and
streamed) and OpenAIChatCompletionsModel: stopping at the tool's result, and the whole loop
(the tool's output sent back, a final answer). Greedy decoding throughout.
"""
from __future__ import annotations

import asyncio
import json

import jsonschema
import openai
import pytest

from conftest import API_KEY

SEA = "Write one sentence about the sea."


def create(client, model_name, **kw):
    kw.setdefault("input", SEA)
    kw.setdefault("max_output_tokens", 24)
    kw.setdefault("temperature", 0)
    return client.responses.create(model=model_name, **kw)


def check_usage(usage, max_output_tokens=None):
    assert usage.input_tokens > 5
    assert usage.output_tokens >= 1
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.output_tokens_details.reasoning_tokens == 0
    assert 0 <= usage.input_tokens_details.cached_tokens <= usage.input_tokens
    if max_output_tokens is not None:
        assert usage.output_tokens <= max_output_tokens


# ---- SmolLM2 ----

def test_string_input_is_one_user_message(client, model_name):
    r = create(client, model_name)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == model_name
    assert r.status in ("completed", "incomplete"), r
    assert r.output_text.strip()
    assert len(r.output) == 1 and r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output[0].id.startswith("msg_") and r.output[0].content[0].type == "output_text"
    assert r.error is None and r.max_output_tokens == 24 and r.temperature == 0
    assert r.tools == [] and r.tool_choice == "auto" and r.parallel_tool_calls is True
    check_usage(r.usage, 24)
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 24
    else:
        assert r.incomplete_details is None
    # The same pipeline as the chat route: the same prompt, and greedy decoding gives the same text.
    c = client.chat.completions.create(model=model_name, messages=[{"role": "user", "content": SEA}], max_tokens=24,
                                       temperature=0)
    assert r.usage.input_tokens == c.usage.prompt_tokens
    assert r.output_text == c.choices[0].message.content
    assert r.usage.output_tokens == c.usage.completion_tokens


def test_max_output_tokens_makes_it_incomplete(client, model_name):
    r = create(client, model_name, input="Tell me a long story about a dragon.", max_output_tokens=3)
    assert r.status == "incomplete", r
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    assert r.output[0].status == "incomplete" and r.output_text


def test_instructions_are_the_system_message(client, model_name):
    system = "You are a pirate. Answer every question like a pirate would."
    r = create(client, model_name, instructions=system, max_output_tokens=16)
    assert r.instructions == system and r.output_text.strip()
    bare = create(client, model_name, max_output_tokens=1)
    # SmolLM2's template puts a default system prompt in when none is given; instructions replace it.
    c = client.chat.completions.create(model=model_name, max_tokens=16, temperature=0,
                                       messages=[{"role": "system", "content": system}, {"role": "user", "content": SEA}])
    assert r.usage.input_tokens == c.usage.prompt_tokens != bare.usage.input_tokens
    assert r.output_text == c.choices[0].message.content


def test_message_items_and_developer_role(client, model_name):
    items = [{"role": "developer", "content": "Answer in one word."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "Blue.", "annotations": []}]},
             {"role": "user", "content": "Another one."}]
    r = create(client, model_name, input=items, max_output_tokens=8)
    assert r.output_text.strip()
    c = client.chat.completions.create(model=model_name, max_tokens=8, temperature=0, messages=[
        {"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another one."}])
    assert r.usage.input_tokens == c.usage.prompt_tokens
    assert r.output_text == c.choices[0].message.content


def test_stream_events_and_deltas_equal_the_final_text(client, model_name):
    whole = create(client, model_name, max_output_tokens=40)
    events = list(create(client, model_name, max_output_tokens=40, stream=True))
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"], types
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed" if whole.status == "completed" else "response.incomplete"], types
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas and all(d.item_id == events[2].item.id and d.output_index == 0 and d.content_index == 0
                          for d in deltas)
    text = "".join(d.delta for d in deltas)
    final = events[-1].response
    assert events[-4].text == text == final.output_text == whole.output_text
    assert final.id == events[0].response.id and final.status == whole.status
    assert final.usage.output_tokens == whole.usage.output_tokens
    # The SDK's helper assembles the same events (it finalises on response.completed).
    with client.responses.stream(model=model_name, input="Say hello.", max_output_tokens=64, temperature=0) as s:
        helper_deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        done = s.get_final_response()
    assert done.status == "completed" and done.output_text == "".join(helper_deltas) != ""


def test_json_schema_text_format_validates(client, model_name):
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 30},
                                                "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                                                "genres": {"type": "array", "items": {"enum": ["drama", "comedy", "sf"]},
                                                           "maxItems": 2}},
              "required": ["title", "year", "genres"], "additionalProperties": False}
    fmt = {"type": "json_schema", "name": "film", "schema": schema, "strict": True}
    r = create(client, model_name, input="A film, as JSON.", max_output_tokens=200, text={"format": fmt})
    assert r.status == "completed", r
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema" and r.text.format.name == "film"
    events = list(create(client, model_name, input="Another film, as JSON.", max_output_tokens=200,
                         text={"format": fmt}, stream=True))
    assert events[-1].type == "response.completed"
    jsonschema.validate(json.loads("".join(e.delta for e in events if e.type == "response.output_text.delta")),
                        schema)
    r = create(client, model_name, input="Describe a cat.", max_output_tokens=256, text={"format": {"type": "json_object"}})
    assert r.status == "completed" and isinstance(json.loads(r.output_text), dict)


@pytest.mark.parametrize("kw, param", [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"conversation": "conv_123"}, "conversation"),
    ({"background": True}, "background"),
    ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].type"),
    ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools[0].type"),
    ({"tools": [{"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:1"}]}, "tools[0].type"),
    ({"tools": [{"type": "image_generation"}]}, "tools[0].type"),
    ({"include": ["message.output_text.logprobs"]}, "include[0]"),
    ({"truncation": "auto"}, "truncation"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}]},
     "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "r"}]}, "input[0].call_id"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "strin"}}}}, "text.format"),
    ({"extra_body": {"n": 2}}, "n"),
])
def test_unsupported_fields_are_400s_naming_them(client, model_name, kw, param):
    with pytest.raises(openai.BadRequestError) as ei:
        create(client, model_name, **kw)
    err = ei.value
    assert err.status_code == 400
    assert err.param == param, err.body
    assert param in err.message, err.message


def test_stored_responses_cannot_be_fetched(client, model_name):
    r = create(client, model_name, max_output_tokens=2, store=True)
    assert r.model_extra.get("store") is False  # nothing is stored, and the Response says so
    with pytest.raises(openai.NotFoundError) as ei:
        client.responses.retrieve(r.id)
    assert "does not store responses" in ei.value.message
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="x")


# ---- Qwen2.5-Coder-0.5B: function calls ----

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                          "required": ["city"], "additionalProperties": False},
           "strict": True}
ASK = "What is the weather in Paris? Use the tool."


@pytest.fixture(scope="module")
def qclient(qwen):
    return openai.OpenAI(base_url=qwen.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_forced_function_call_then_its_output(qclient):
    r = qclient.responses.create(model="qwen-e2e", input=ASK, tools=[WEATHER],
                                 tool_choice={"type": "function", "name": "get_weather"}, temperature=0,
                                 max_output_tokens=64)
    assert r.status == "completed", r
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    call = calls[0]
    assert call.name == "get_weather" and call.status == "completed"
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    args = json.loads(call.arguments)
    jsonschema.validate(args, WEATHER["parameters"])
    assert args["city"].lower() == "paris"
    assert r.tool_choice.type == "function" and r.tool_choice.name == "get_weather"
    assert r.tools[0].name == "get_weather"
    # The call and its result go back as input items; the template renders both into the prompt.
    items = [{"role": "user", "content": ASK}] + [o.to_dict() for o in r.output] + [
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees Celsius and sunny"}]
    r2 = qclient.responses.create(model="qwen-e2e", input=items, tools=[WEATHER], temperature=0, max_output_tokens=48)
    assert r2.status in ("completed", "incomplete") and r2.output, r2
    assert r2.output_text.strip() or any(o.type == "function_call" for o in r2.output)
    assert r2.usage.input_tokens >= r.usage.input_tokens + r.usage.output_tokens + 8, (r.usage, r2.usage)


def test_auto_function_call(qclient):
    r = qclient.responses.create(model="qwen-e2e", input=ASK, tools=[WEATHER], temperature=0, max_output_tokens=64)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather", r.output
    assert json.loads(calls[0].arguments).get("city", "").lower() == "paris"
    none = qclient.responses.create(model="qwen-e2e", input=ASK, tools=[WEATHER], tool_choice="none", temperature=0,
                                    max_output_tokens=16)
    assert not [o for o in none.output if o.type == "function_call"] and none.output_text


def test_function_call_streamed(qclient):
    events = list(qclient.responses.create(model="qwen-e2e", input=ASK, tools=[WEATHER], tool_choice="required",
                                           temperature=0, max_output_tokens=64, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert len(added) == 1 and added[0].item.arguments == "" and added[0].item.status == "in_progress"
    item_id = added[0].item.id
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and done[0].item_id == item_id and done[0].arguments == args
    jsonschema.validate(json.loads(args), WEATHER["parameters"])
    final = events[-1]
    assert final.type == "response.completed"
    fc = [o for o in final.response.output if o.type == "function_call"]
    assert fc[0].id == item_id and fc[0].arguments == args and fc[0].name == "get_weather"


# ---- the OpenAI Agents SDK on the Qwen server ----

def run_agent(qwen, api: str, stop_on_first_tool: bool):
    """One agents.Runner run of a weather agent with a @function_tool; (result, the cities the tool saw)."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    seen: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather of a city.

        Args:
            city: the city.
        """
        seen.append(city)
        return f"18 degrees Celsius and sunny in {city}"

    async def run():
        client = openai.AsyncOpenAI(base_url=qwen.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        if api == "chat_completions":
            model = agents.OpenAIChatCompletionsModel(model="qwen-e2e", openai_client=client)
        else:
            model = agents.OpenAIResponsesModel(model="qwen-e2e", openai_client=client)
        # The named tool_choice makes the 0.5B model call the tool; the Agent resets it to auto
        # after the call (reset_tool_choice), so a second turn may answer in text.
        agent = agents.Agent(name="weather",
                             instructions="You answer questions about the weather. Use the get_weather tool, then "
                                          "answer in one sentence.",
                             tools=[get_weather], model=model,
                             tool_use_behavior="stop_on_first_tool" if stop_on_first_tool else "run_llm_again",
                             model_settings=agents.ModelSettings(tool_choice="get_weather", temperature=0,
                                                                 max_tokens=64))
        try:
            if api == "responses-streamed":
                result = agents.Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=4)
                async for _ in result.stream_events():
                    pass
                return result
            return await agents.Runner.run(agent, "What is the weather in Paris?", max_turns=4)
        finally:
            await client.close()

    return asyncio.run(run()), seen


@pytest.mark.parametrize("api", ["responses", "responses-streamed", "chat_completions"])
def test_agents_sdk_calls_the_function_tool(qwen, api):
    result, seen = run_agent(qwen, api, stop_on_first_tool=True)
    assert len(seen) == 1 and seen[0].lower() == "paris", seen
    assert result.final_output == "18 degrees Celsius and sunny in Paris", result.final_output
    assert len(result.raw_responses) == 1
    assert result.raw_responses[0].usage.input_tokens > 50


@pytest.mark.parametrize("api", ["responses", "responses-streamed", "chat_completions"])
def test_agents_sdk_sends_the_tool_output_back(qwen, api):
    """The whole loop: the call, the function_call_output (tool message) sent back, a final answer.
    What the 0.5B model answers is not asserted, only that the run ends with one."""
    result, seen = run_agent(qwen, api, stop_on_first_tool=False)
    assert seen and seen[0].lower() == "paris", seen
    assert len(result.raw_responses) >= 2
    assert isinstance(result.final_output, str) and result.final_output.strip()
    first, last = result.raw_responses[0].usage, result.raw_responses[-1].usage
    assert last.input_tokens > first.input_tokens + first.output_tokens, (first, last)
