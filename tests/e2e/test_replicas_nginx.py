"""Two `hindsight serve` replicas behind nginx (deploy/nginx/hindsight.conf, docs/deploy.md).

nginx runs as whoever runs the tests: its own prefix, pid file, temp paths and logs in a temporary
directory, `daemon off`, listening on a free loopback port; the replicas' addresses and the listen
line of the shipped config are rewritten, nothing else. Shows that
  - requests of one X-Session-Id land on one replica, and a follow-up finds the conversation's
    prefix in that replica's prefix cache (usage.prompt_tokens_details.cached_tokens), which the
    other replica does not have;
  - different session ids spread over both replicas, each id always on the same one;
  - streams pass through unbuffered (SSE);
  - when the session's replica gets SIGTERM, its stream in flight still finishes (drain) while the
    session's next request is answered by the other replica (nginx retries the draining
    replica's 503), and after the replica has exited the session keeps being served;
  - nginx refuses a body over the replicas' 8 MiB limit with an OpenAI-style 413.
Skipped when nginx is not installed (scripts/setup installs it on Debian).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from hs_server import ROOT, free_port, http, metric_value

CONF = ROOT / "deploy/nginx/hindsight.conf"
API_KEY = "test-key"
MODEL = "smollm2-e2e"
# Tokens of the stream that is in flight when its replica gets SIGTERM: long enough that the
# session's next request is answered while the replica still drains (~8 s on 2 CPU cores).
N_STREAM = 500
REPLICA_ARGS = ["-c", "8192", "--max-model-len", "4096", "--max-num-seqs", "8", "--shutdown-timeout", "60"]

# A system prompt long enough to fill many 16-token prefix-cache pages.
SYSTEM = ("You are the build assistant of a C++ project. Rules: answer in one short sentence; name files "
          "by their path; never invent flags. " +
          " ".join(f"Fact {i}: module m{i} depends on module m{i + 1} and is tested by test_m{i}." for i in range(24)))


def _nginx_binary() -> str | None:
    """nginx from HS_NGINX, PATH or the sbin directories (not on a Debian user's PATH)."""
    cand = os.environ.get("HS_NGINX")
    if cand:
        return cand if os.access(cand, os.X_OK) else None
    found = shutil.which("nginx")
    if found:
        return found
    for d in ("/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"):
        p = os.path.join(d, "nginx")
        if os.access(p, os.X_OK):
            return p
    return None


class Nginx:
    """nginx -p DIR -c DIR/nginx.conf -e stderr, in the foreground, on 127.0.0.1:port."""

    def __init__(self, binary: str, replica_ports: list[int]):
        self.binary = binary
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="hindsight-nginx-"))
        # Started as root, nginx's workers run as `nobody`: they must reach the temp paths.
        os.chmod(self.dir, 0o755)
        conf = CONF.read_text()
        conf, n = re.subn(r"^(\s*)listen 8080;", rf"\1listen 127.0.0.1:{self.port};", conf, flags=re.M)
        assert n == 1, "deploy/nginx/hindsight.conf: expected one 'listen 8080;' line"
        for default, port in zip((8081, 8082), replica_ports):
            conf, n = re.subn(rf"server 127\.0\.0\.1:{default} ", f"server 127.0.0.1:{port} ", conf)
            assert n == 2, f"deploy/nginx/hindsight.conf: expected 127.0.0.1:{default} in both upstreams"
        (self.dir / "hindsight.conf").write_text(conf)
        d = self.dir
        (d / "nginx.conf").write_text(f"""daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log notice;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    include {d}/hindsight.conf;
}}
""")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> "Nginx":
        self._out = open(self.dir / "stderr.log", "wb")
        self.proc = subprocess.Popen([self.binary, "-p", f"{self.dir}/", "-c", str(self.dir / "nginx.conf"),
                                      "-e", "stderr"], stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited with {self.proc.returncode}\n{self.logs()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nginx not listening within {timeout:.0f} s\n{self.logs()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # fast shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None:
            self._out.close()

    def logs(self) -> str:
        parts = []
        for name in ("stderr.log", "error.log", "access.log"):
            p = self.dir / name
            if p.is_file():
                parts.append(f"---- nginx {name} ----\n" + p.read_text(errors="replace")[-6000:])
        return "\n".join(parts)


@pytest.fixture
def nginx_binary() -> str:
    b = _nginx_binary()
    if b is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx; scripts/setup does it)")
    return b


def _replica(upstream: str) -> str:
    """The replica that answered: the last address nginx tried (X-Upstream: "a, b" after a retry)."""
    return upstream.split(",")[-1].strip()


def test_two_replicas_behind_nginx(nginx_binary, start_server, request):
    import openai

    replicas = [start_server(REPLICA_ARGS, api_key=API_KEY, served_model_name=MODEL) for _ in range(2)]
    addr = {f"127.0.0.1:{r.port}": r for r in replicas}
    lb = Nginx(nginx_binary, [r.port for r in replicas]).start()
    try:
        _run(lb, addr, openai)
    except BaseException:
        print("\n" + lb.logs())
        raise
    finally:
        lb.stop()
    if request.session.testsfailed == 0:
        shutil.rmtree(lb.dir, ignore_errors=True)


def _run(lb: Nginx, addr, openai) -> None:
    client = openai.OpenAI(base_url=lb.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)

    def chat(session: str, messages, **kw):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, temperature=0, max_tokens=kw.pop("max_tokens", 8),
            extra_headers={"X-Session-Id": session}, **kw)
        return raw.parse(), raw.headers["X-Upstream"]

    # The load balancer's /health: 200 while any replica is up.
    status, headers, body = http("GET", lb.base_url + "/health", timeout=10)
    assert status == 200 and json.loads(body)["status"] == "ok", (status, body[:200])

    # (b) Different session ids spread over both replicas; each id keeps its replica.
    home: dict[str, str] = {}
    for i in range(16):
        sid = f"agent-{i}"
        r, up = chat(sid, [{"role": "user", "content": f"Say the number {i}."}], max_tokens=1)
        assert r.choices[0].finish_reason in ("stop", "length")
        home[sid] = _replica(up)
        assert home[sid] in addr, up
    assert set(home.values()) == set(addr), f"16 session ids all on one replica: {home}"
    for sid in ("agent-0", "agent-1", "agent-2", "agent-3"):
        status, headers, _ = http("GET", lb.base_url + "/v1/models", headers={
            "Authorization": f"Bearer {API_KEY}", "X-Session-Id": sid}, timeout=10)
        assert status == 200 and _replica(headers["X-Upstream"]) == home[sid], (sid, headers.get("X-Upstream"))

    # (a) One session's follow-up lands on the same replica and reuses the cached prefix.
    session = "agent-A"
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Which test covers m3?"}]
    r1, up1 = chat(session, turn1)
    x = _replica(up1)
    turn2 = turn1 + [{"role": "assistant", "content": r1.choices[0].message.content or "test_m3."},
                     {"role": "user", "content": "And which module does m3 depend on?"}]
    r2, up2 = chat(session, turn2)
    assert _replica(up2) == x, (up1, up2)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert r1.usage.prompt_tokens > 400
    assert cached >= r1.usage.prompt_tokens - 32, (cached, r1.usage.prompt_tokens, r2.usage.prompt_tokens)
    # The same conversation under a session that lives on the other replica is computed afresh there.
    other_sid = next(s for s, h in home.items() if h != x)
    r3, up3 = chat(other_sid, turn2)
    y = _replica(up3)
    assert y != x and r3.usage.prompt_tokens == r2.usage.prompt_tokens
    assert (r3.usage.prompt_tokens_details.cached_tokens or 0) == 0, r3.usage
    rx, ry = addr[x], addr[y]

    # A stream of the session through nginx, unbuffered: its first chunk arrives while the
    # replica still runs the request.
    stream_out: dict = {}
    first = threading.Event()

    def stream():
        events = []
        try:
            with httpx.stream("POST", lb.base_url + "/v1/chat/completions", timeout=120,
                              headers={"Authorization": f"Bearer {API_KEY}", "X-Session-Id": session},
                              json={"model": MODEL, "messages": turn1, "max_tokens": N_STREAM, "ignore_eos": True,
                                    "temperature": 0, "stream": True,
                                    "stream_options": {"include_usage": True}}) as resp:
                stream_out["status"] = resp.status_code
                stream_out["upstream"] = resp.headers.get("X-Upstream")
                stream_out["content_type"] = resp.headers.get("Content-Type")
                for line in resp.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        stream_out["done"] = True
                        break
                    events.append(json.loads(line[len("data: "):]))
                    if any(c["delta"].get("content") for c in events[-1].get("choices", [])):
                        first.set()  # the first token, not just the role chunk
        except httpx.HTTPError as e:
            stream_out["error"] = repr(e)
        stream_out["events"] = events
        first.set()

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    assert first.wait(60) and stream_out.get("events") is None, stream_out.get("error")
    assert _replica(stream_out["upstream"]) == x
    assert "text/event-stream" in stream_out["content_type"]
    # (/metrics is a snapshot of the engine's last step: poll until it shows the request.)
    deadline = time.monotonic() + 5
    while metric_value(rx.metrics(), "hindsight:num_requests_running") != 1:
        assert time.monotonic() < deadline and "events" not in stream_out, \
            "tokens arrived only after the request had ended: nginx buffered the stream"
        time.sleep(0.02)

    # (c) SIGTERM the session's replica: it drains (its stream goes on, new requests get 503) and
    # nginx sends the session's next request to the other replica.
    rx.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while http("GET", rx.base_url + "/health", timeout=5)[0] != 503:
        assert time.monotonic() < deadline, "the replica did not start draining"
        time.sleep(0.05)
    r4, up4 = chat(session, turn2)
    assert _replica(up4) == y, up4
    assert r4.choices[0].message.content
    draining_seen = rx.alive()
    t.join(90)
    assert stream_out.get("done"), stream_out.get("error")
    usage = [e["usage"] for e in stream_out["events"] if e.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == N_STREAM, usage
    text_chunks = [e for e in stream_out["events"] if e.get("choices") and e["choices"][0]["delta"].get("content")]
    assert len(text_chunks) > 10
    assert rx.proc.wait(30) == 0
    # The retry of a 503 is what kept r4 alive only if the replica was still draining then.
    assert draining_seen, "the replica exited before the follow-up: the drain path was not exercised"
    assert up4.startswith(x), f"expected nginx to try the draining replica first, then {y}: {up4}"

    # After the replica is gone the session keeps being served (connection refused -> next replica),
    # and its follow-ups hit the prefix cache of their new replica.
    turn3 = turn2 + [{"role": "assistant", "content": r4.choices[0].message.content},
                     {"role": "user", "content": "Thanks."}]
    r5, up5 = chat(session, turn3)
    assert _replica(up5) == y, up5
    assert r5.usage.prompt_tokens_details.cached_tokens >= r2.usage.prompt_tokens - 32, r5.usage
    status, _, body = http("GET", lb.base_url + "/health", timeout=10)
    assert status == 200, (status, body[:200])
    # A streamed request of a session that lived on the stopped replica, through the openai SDK.
    moved = next(s for s, h in home.items() if h == x)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to five."}], max_tokens=16, temperature=0,
        stream=True, extra_headers={"X-Session-Id": moved}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert rx.proc.poll() == 0

    # nginx refuses what the replicas would refuse (over 8 MiB) with an OpenAI-style error body.
    with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 8388609\r\n\r\n")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            part = s.recv(4096)
            if not part:
                break
            reply += part
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), reply[:200]
    assert json.loads(payload)["error"]["code"] == "request_too_large"

    # The surviving replica ends clean: nothing running, no KV pages held. (/metrics is the
    # snapshot of the engine's last step: the final SSE event can reach the client before the
    # step that sent it has published its snapshot, so poll briefly.)
    deadline = time.monotonic() + 5
    m = ry.metrics()
    while metric_value(m, "hindsight:num_requests_running") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        m = ry.metrics()
    assert metric_value(m, "hindsight:num_requests_running") == 0
    assert metric_value(m, "hindsight:kv_pages_used") == 0
