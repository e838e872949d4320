"""Error answers over raw HTTP (httpx): OpenAI's error shape, status codes, and a server
that stays healthy after each of them."""
from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

CHAT_OK = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def http_client(server):
    with httpx.Client(base_url=server.base_url, headers=server.auth, timeout=60) as c:
        yield c


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text[:500]
    body = r.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert {"message", "type", "param", "code"} <= set(err), err
    assert isinstance(err["message"], str) and err["message"]
    return err


def test_malformed_json(http_client):
    r = http_client.post("/v1/chat/completions", content=b'{"messages": [', headers={"Content-Type": "application/json"})
    err = error_of(r, 400)
    assert err["type"] == "invalid_request_error"


def test_body_not_an_object(http_client):
    r = http_client.post("/v1/completions", content=b"[1, 2, 3]", headers={"Content-Type": "application/json"})
    assert error_of(r, 400)["type"] == "invalid_request_error"


@pytest.mark.parametrize("route,patch,param", [
    ("/v1/chat/completions", {"temperature": "hot"}, "temperature"),
    ("/v1/chat/completions", {"messages": "hello"}, "messages"),
    ("/v1/chat/completions", {"max_tokens": -1}, "max_tokens"),
    ("/v1/chat/completions", {"top_p": 2}, "top_p"),
    ("/v1/chat/completions", {"n": 0}, "n"),
    ("/v1/chat/completions", {"temperature": 3.5}, "temperature"),
    ("/v1/chat/completions", {"stop": 5}, "stop"),
    ("/v1/chat/completions", {"top_logprobs": 3}, "top_logprobs"),
    ("/v1/completions", {"prompt": 42}, "prompt"),
    ("/v1/completions", {"max_tokens": "ten"}, "max_tokens"),
    ("/v1/completions", {"presence_penalty": 9}, "presence_penalty"),
])
def test_wrong_types_and_ranges(http_client, route, patch, param):
    body = dict(CHAT_OK) if "chat" in route else {"prompt": "Hi", "max_tokens": 4}
    body.update(patch)
    err = error_of(http_client.post(route, json=body), 400)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param or param in err["message"], err


def test_missing_messages_and_prompt(http_client):
    err = error_of(http_client.post("/v1/chat/completions", json={"max_tokens": 4}), 400)
    assert "messages" in (err["param"] or "") + err["message"]
    err = error_of(http_client.post("/v1/completions", json={"max_tokens": 4}), 400)
    assert "prompt" in (err["param"] or "") + err["message"]


def test_token_id_out_of_range(http_client):
    err = error_of(http_client.post("/v1/completions", json={"prompt": [1, 2, 10_000_000], "max_tokens": 2}), 400)
    assert err["type"] == "invalid_request_error"


def test_prompt_over_context(server, http_client):
    prompt = "hello world " * 2600  # ~5200 tokens > max_model_len 4096
    n_prompt = len(server.tokenize(prompt))
    assert n_prompt > 4096
    err = error_of(http_client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8}), 400)
    assert "4096" in err["message"] and str(n_prompt) in err["message"], err["message"]


def test_prompt_plus_max_tokens_over_context(server, http_client):
    prompt = "hello world " * 100
    n_prompt = len(server.tokenize(prompt))
    max_tokens = 4096 - n_prompt + 10
    err = error_of(http_client.post("/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens}), 400)
    msg = err["message"]
    assert "4096" in msg and str(n_prompt) in msg and str(max_tokens) in msg, msg


def test_chat_over_context(http_client):
    body = {"messages": [{"role": "user", "content": "word " * 5000}], "max_tokens": 4}
    err = error_of(http_client.post("/v1/chat/completions", json=body), 400)
    assert "4096" in err["message"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-key"}, {"Authorization": "test-key"}])
def test_auth(server, headers):
    r = httpx.post(server.base_url + "/v1/chat/completions", json=CHAT_OK, headers=headers, timeout=30)
    err = error_of(r, 401)
    assert err["type"] == "authentication_error"
    r = httpx.get(server.base_url + "/v1/models", headers=headers, timeout=30)
    assert r.status_code == 401


def test_unknown_model(http_client):
    err = error_of(http_client.post("/v1/chat/completions", json={**CHAT_OK, "model": "gpt-17"}), 404)
    assert "gpt-17" in err["message"]
    err = error_of(http_client.post("/v1/completions", json={"prompt": "x", "model": "gpt-17"}), 404)


def test_unknown_role(http_client):
    body = {"messages": [{"role": "wizard", "content": "Hi"}], "max_tokens": 4}
    err = error_of(http_client.post("/v1/chat/completions", json=body), 400)
    assert err["param"] == "messages[0].role" and "wizard" in err["message"]


def test_wrong_method_405(http_client):
    r = http_client.get("/v1/chat/completions")
    error_of(r, 405)
    assert r.headers["allow"] == "POST"


def test_log_lines_cannot_be_forged(server, http_client):
    """A %0a (and an ESC) in the path must not start a new log line."""
    r = http_client.get("/v1/x%0a[error]%20forged%1b[2J")
    assert r.status_code == 404
    time.sleep(0.2)  # the access log line is written after the response
    with open(server.log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace")
    lines = log.splitlines()
    assert not any(line.startswith("[error] forged") for line in lines), log[-2000:]
    assert "\x1b" not in log
    assert any("/v1/x\\n[error] forged\\x1b[2J 404" in line for line in lines), log[-2000:]


def test_chunked_body_over_the_cap_413(server):
    """A chunked body is capped like one with Content-Length (it used to be buffered whole)."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            f"Content-Type: application/json\r\nAuthorization: {server.auth['Authorization']}\r\n"
            f"Connection: close\r\n\r\n")
    chunk = b"x" * 65536
    parts = (b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(9 * 16))  # 9 MiB > the 8 MiB cap
    status, raw = _raw_exchange(server.port, head, parts)
    assert status == 413, raw[:300]


def test_unknown_route(http_client):
    assert http_client.get("/v1/nope").status_code == 404


def _raw_exchange(port: int, head: str, parts, timeout: float = 30) -> tuple[int, bytes]:
    """Sends `head` then the byte strings of `parts` over a raw socket while a thread reads the
    answer, tolerating a server that answers (and closes) before reading everything: returns
    (status, response bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    received = bytearray()
    done = threading.Event()

    def reader():
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                received.extend(chunk)
        except OSError:
            pass
        done.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        s.sendall(head.encode())
        for part in parts:
            if done.is_set():
                break
            s.sendall(part)
    except OSError:
        pass  # the server stopped reading: its answer is what counts
    done.wait(timeout)
    s.close()
    line = bytes(received).split(b"\r\n", 1)[0]
    assert line.startswith(b"HTTP/1."), bytes(received[:200])
    return int(line.split()[1]), bytes(received)


def _raw_post(port: int, path: str, body: bytes, headers: dict[str, str], timeout: float = 30) -> tuple[int, bytes]:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    view = memoryview(body)
    return _raw_exchange(port, head, (view[off:off + (1 << 16)] for off in range(0, len(body), 1 << 16)), timeout)


def test_body_too_large(server):
    body = json.dumps({"prompt": "x" * (9 << 20), "max_tokens": 1}).encode()
    status, raw = _raw_post(server.port, "/v1/completions", body,
                            {"Content-Type": "application/json", **server.auth})
    assert status == 413, raw[:300]


def test_health_without_key(server):
    r = httpx.get(server.base_url + "/health", timeout=10)
    assert r.status_code == 200
    # while the model loaded, /health answered 503 with an error body (if polled early enough)
    for status, body in server.health_seen:
        assert status in (200, 503)
        if status == 503:
            assert json.loads(body)["error"]["type"] == "unavailable_error"


def test_metrics_reachable(server):
    m = server.metrics()
    assert "hindsight:num_requests_running" in m
    assert "hindsight:time_to_first_token_seconds_bucket" in m


def test_queue_full_429(start_server):
    """One running sequence and a queue of one: a burst gets 429 with Retry-After."""
    srv = start_server(["-c", "4096", "--max-model-len", "2048", "--max-num-seqs", "1", "--max-waiting", "1"])
    long_body = {"prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=srv.base_url, headers=srv.auth, timeout=60) as c:
        with c.stream("POST", "/v1/completions", json=long_body) as long_stream:
            assert long_stream.status_code == 200
            lines = long_stream.iter_lines()
            next(line for line in lines if line.startswith("data: "))  # it is running now
            results: list[httpx.Response] = []
            lock = threading.Lock()

            def one():
                r = httpx.post(srv.base_url + "/v1/completions", headers=srv.auth, timeout=120,
                               json={"prompt": "Hello", "max_tokens": 2})
                with lock:
                    results.append(r)
            threads = [threading.Thread(target=one) for _ in range(5)]
            for t in threads:
                t.start()
            time.sleep(1.0)  # the burst is queued or refused by now
        # closing the long stream cancels it; the queued request then runs
        for t in threads:
            t.join(120)
    statuses = sorted(r.status_code for r in results)
    assert len(statuses) == 5
    assert statuses.count(429) >= 1, statuses
    assert statuses.count(200) >= 1, statuses
    assert set(statuses) <= {200, 429}, statuses
    for r in results:
        if r.status_code == 429:
            error_of(r, 429)
            assert "retry-after" in {k.lower() for k in r.headers}
    assert httpx.get(srv.base_url + "/health", timeout=10).status_code == 200


def test_still_healthy(server, client, model_name):
    assert server.alive()
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
    r = client.completions.create(model=model_name, prompt="Hello", max_tokens=3, temperature=0)
    assert r.usage.completion_tokens >= 1
