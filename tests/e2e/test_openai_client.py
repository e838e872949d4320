"""The official `openai` Python client against hindsight serve (SmolLM2-135M-Instruct).

Greedy (temperature 0) outputs are deterministic, so streaming is checked against the
non-streaming text, stop strings against a prefix of the unstopped text, token-id prompts
against the string prompt, and the server against `hindsight generate`.
"""
from __future__ import annotations

import subprocess

import pytest

from hs_server import hs_bin, hs_model

CHAT = [{"role": "user", "content": "Write one sentence about the sea."}]
PROMPT = "The three most important inventions in history are"
IGNORE_EOS = {"ignore_eos": True}


def chat_text(client, model_name, **kw):
    kw.setdefault("messages", CHAT)
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=model_name, **kw)


def completion(client, model_name, **kw):
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    return client.completions.create(model=model_name, **kw)


def check_usage(usage, *, max_tokens=None):
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    if max_tokens is not None:
        assert usage.completion_tokens <= max_tokens


def test_chat_completion(client, model_name):
    r = chat_text(client, model_name)
    assert r.object == "chat.completion"
    assert r.model == model_name
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content.strip()
    assert c.finish_reason in ("stop", "length")
    check_usage(r.usage, max_tokens=24)


def test_completion(client, model_name):
    r = completion(client, model_name)
    assert r.object == "text_completion"
    assert r.model == model_name
    assert len(r.choices) == 1
    assert isinstance(r.choices[0].text, str) and r.choices[0].text.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    check_usage(r.usage, max_tokens=24)


def test_models_lists_served_name(client, model_name):
    ids = [m.id for m in client.models.list().data]
    assert model_name in ids


def test_stream_chat_equals_non_stream(client, model_name):
    full = chat_text(client, model_name).choices[0]
    chunks = list(chat_text(client, model_name, stream=True))
    assert chunks, "no chunks"
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [full.finish_reason]
    ids = {ch.id for ch in chunks}
    assert len(ids) == 1


def test_stream_completion_equals_non_stream(client, model_name):
    full = completion(client, model_name).choices[0]
    chunks = list(completion(client, model_name, stream=True))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == full.text
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [full.finish_reason]


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_stream_include_usage(client, model_name, kind):
    make = chat_text if kind == "chat" else completion
    ref = make(client, model_name, max_tokens=12, extra_body=IGNORE_EOS)
    chunks = list(make(client, model_name, max_tokens=12, stream=True, extra_body=IGNORE_EOS,
                       stream_options={"include_usage": True}))
    assert len(chunks) >= 2
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 12
    assert last.usage.prompt_tokens == ref.usage.prompt_tokens
    assert last.usage.total_tokens == last.usage.prompt_tokens + 12
    for ch in chunks[:-1]:
        assert ch.usage is None
        assert len(ch.choices) == 1


def test_stream_without_include_usage_has_no_usage(client, model_name):
    chunks = list(completion(client, model_name, max_tokens=6, stream=True))
    assert all(ch.usage is None for ch in chunks)
    assert all(len(ch.choices) == 1 for ch in chunks)


def _pick_stop(text: str) -> str:
    """A short substring of `text` that first occurs after its start."""
    for start in range(len(text) // 3, len(text) - 3):
        sub = text[start:start + 3]
        if sub.strip() and text.find(sub) > 0:
            return sub
    pytest.skip(f"no usable stop string in {text!r}")


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string(client, model_name, stream):
    full = completion(client, model_name, max_tokens=32, extra_body=IGNORE_EOS).choices[0].text
    stop = _pick_stop(full)
    expected = full[:full.find(stop)]
    if stream:
        chunks = list(completion(client, model_name, max_tokens=32, stop=[stop], stream=True,
                                 extra_body=IGNORE_EOS))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        assert finish == ["stop"]
    else:
        r = completion(client, model_name, max_tokens=32, stop=stop, extra_body=IGNORE_EOS).choices[0]
        text = r.text
        assert r.finish_reason == "stop"
    assert stop not in text
    assert text == expected


def test_stop_string_chat(client, model_name):
    full = chat_text(client, model_name, max_tokens=32, extra_body=IGNORE_EOS).choices[0].message.content
    stop = _pick_stop(full)
    r = chat_text(client, model_name, max_tokens=32, stop=[stop, "zzqx-never"], extra_body=IGNORE_EOS).choices[0]
    assert r.finish_reason == "stop"
    assert stop not in r.message.content
    assert r.message.content == full[:full.find(stop)]


def test_seed_reproducible(client, model_name):
    def sample(seed):
        return completion(client, model_name, temperature=0.8, seed=seed, max_tokens=24,
                          extra_body=IGNORE_EOS).choices[0].text
    a = sample(1234)
    assert sample(1234) == a
    others = [sample(s) for s in (1, 2, 3)]
    assert any(o != a for o in others), f"seeds 1234, 1, 2, 3 all gave {a!r}"


def test_n_choices(client, model_name):
    r = chat_text(client, model_name, n=3, temperature=0.9, seed=7, max_tokens=8)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    for c in r.choices:
        assert isinstance(c.message.content, str)
        assert c.finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 3 * 8


def test_n_choices_stream(client, model_name):
    chunks = list(completion(client, model_name, n=2, temperature=0.9, seed=11, max_tokens=8, stream=True,
                             extra_body=IGNORE_EOS, stream_options={"include_usage": True}))
    texts = {0: "", 1: ""}
    finished = set()
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] += c.text
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1}
    assert chunks[-1].usage.completion_tokens == 16
    # the same request without streaming gives the same two texts (seed + choice index)
    r = completion(client, model_name, n=2, temperature=0.9, seed=11, max_tokens=8, extra_body=IGNORE_EOS)
    assert {c.index: c.text for c in r.choices} == texts


def test_chat_logprobs(client, model_name):
    r = chat_text(client, model_name, logprobs=True, top_logprobs=3, max_tokens=8)
    c = r.choices[0]
    assert c.logprobs is not None
    content = c.logprobs.content
    assert len(content) == r.usage.completion_tokens
    for item in content:
        assert item.logprob <= 0
        assert len(item.top_logprobs) == 3
        tops = [t.logprob for t in item.top_logprobs]
        assert all(t <= 0 for t in tops)
        assert tops == sorted(tops, reverse=True)
        assert item.logprob >= min(tops) - 1e-4
        # greedy: the chosen token is the most likely one
        assert item.logprob == pytest.approx(tops[0], abs=1e-3)
        assert item.token == item.top_logprobs[0].token
        assert item.bytes is not None
    if c.finish_reason == "length":  # no end-of-generation token: the bytes spell the text
        assert b"".join(bytes(i.bytes) for i in content).decode("utf-8", "replace") == c.message.content


def test_completion_logprobs(client, model_name):
    r = completion(client, model_name, logprobs=2, max_tokens=6, extra_body=IGNORE_EOS)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 6 == len(lp.token_logprobs) == len(lp.top_logprobs)
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0
        assert 2 <= len(top) <= 3  # the top 2 plus the chosen token when it is not among them
        assert tok in top


def test_max_tokens_length(client, model_name):
    r = completion(client, model_name, max_tokens=20, extra_body=IGNORE_EOS)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 20
    rc = chat_text(client, model_name, max_completion_tokens=5, extra_body=IGNORE_EOS)
    assert rc.choices[0].finish_reason == "length"
    assert rc.usage.completion_tokens == 5


def test_cached_tokens_on_repeated_prompt(client, model_name):
    words = ("harbor lantern quiet meadow copper violin orbit saffron glacier thimble "
             "ember willow canyon pepper marble falcon ").split()
    long_prompt = "Notes: " + " ".join(words[(i * 7) % len(words)] for i in range(700)) + ". Summary:"
    first = completion(client, model_name, prompt=long_prompt, max_tokens=2)
    second = completion(client, model_name, prompt=long_prompt, max_tokens=2)
    assert first.usage.prompt_tokens > 500
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    details = second.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens > 0
    assert details.cached_tokens < second.usage.prompt_tokens
    assert second.choices[0].text == first.choices[0].text


def test_prompt_as_token_ids(server, client, model_name):
    ids = server.tokenize(PROMPT)
    assert ids and all(isinstance(i, int) for i in ids)
    by_text = completion(client, model_name, max_tokens=12)
    by_ids = completion(client, model_name, prompt=ids, max_tokens=12)
    assert by_ids.usage.prompt_tokens == len(ids) == by_text.usage.prompt_tokens
    assert by_ids.choices[0].text == by_text.choices[0].text


def test_tokenize_detokenize_roundtrip(server):
    status, _, body = server.post("/tokenize", {"prompt": PROMPT})
    assert status == 200
    import json
    j = json.loads(body)
    assert j["count"] == len(j["tokens"])
    assert j["max_model_len"] == 4096
    no_special = server.tokenize(PROMPT, add_special_tokens=False)
    status, _, body = server.post("/detokenize", {"tokens": no_special})
    assert status == 200
    assert json.loads(body)["prompt"] == PROMPT


GREEDY_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
]


@pytest.mark.parametrize("prompt", GREEDY_PROMPTS)
def test_greedy_matches_generate_cli(client, model_name, prompt):
    """/v1/completions (BOS as the vocabulary says, like `generate`) == `hindsight generate --temp 0`."""
    n = 32
    cli = subprocess.run([str(hs_bin()), "generate", "-m", str(hs_model()), "-p", prompt, "-n", str(n),
                          "--temp", "0", "-q", "-c", "1024"],
                         capture_output=True, timeout=180)
    assert cli.returncode == 0, cli.stderr.decode(errors="replace")
    out = cli.stdout.decode("utf-8")
    assert out.endswith("\n")
    cli_text = out[:-1]  # generate prints one newline after the completion
    r = completion(client, model_name, prompt=prompt, max_tokens=n)
    assert r.choices[0].text == cli_text


def test_logit_bias_forces_and_bans_a_token(server, client, model_name):
    """logit_bias does what it says: +100 makes a token the greedy choice at every step, -100
    keeps the greedy answer's first token out of it."""
    (forced,) = server.tokenize(" banana", add_special_tokens=False)
    r = client.completions.create(model=model_name, prompt="The capital of France is", max_tokens=3, temperature=0,
                                  logit_bias={str(forced): 100})
    assert r.choices[0].text == " banana" * 3, r.choices[0].text
    plain = client.completions.create(model=model_name, prompt="The capital of France is", max_tokens=1, temperature=0)
    first = server.tokenize(plain.choices[0].text, add_special_tokens=False)[0]
    banned = client.completions.create(model=model_name, prompt="The capital of France is", max_tokens=1,
                                       temperature=0, logit_bias={str(first): -100})
    assert banned.choices[0].text != plain.choices[0].text


@pytest.mark.parametrize("field, value", [("functions", []), ("function_call", "auto"), ("audio", {"voice": "x"}),
                                          ("prediction", {"type": "content", "content": "x"})])
def test_unsupported_generation_fields_are_400s(client, model_name, field, value):
    import openai
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       extra_body={field: value})
    assert field in str(e.value)
