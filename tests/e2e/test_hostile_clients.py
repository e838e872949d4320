"""Hostile and unusual HTTP clients against a real `hindsight serve` (issue 17), on raw sockets:
a chunked body over the cap (413 without the server buffering it), 200 slow-header sockets
while /health and a streamed chat keep answering, the header deadline, the connection cap
(503, /health still answered, an established stream unaffected), pipelining, HTTP/1.0,
wrong methods, a port in use, and log injection."""
from __future__ import annotations

import json
import socket
import subprocess
import threading
import time

import httpx
import pytest

from hs_server import http


def _connect(port: int, timeout: float = 30) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class _Reader:
    """Parses HTTP/1.x responses off one socket, one after another."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        self.closed = False

    def _fill(self) -> bool:
        if self.closed:
            return False
        data = self.sock.recv(65536)
        if not data:
            self.closed = True
            return False
        self.buf += data
        return True

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise EOFError(self.buf[:200])
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError(f"{len(self.buf)} of {n} bytes")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self) -> tuple[str, int, dict[str, str], bytes]:
        """(version, status, headers lower-cased, body)."""
        status_line = self._line().decode()
        version, status = status_line.split(" ", 2)[:2]
        headers: dict[str, str] = {}
        while True:
            line = self._line()
            if not line:
                break
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        if int(status) == 100:
            return self.response()
        if "content-length" in headers:
            body = self._take(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    self._line()
                    break
                body += self._take(size)
                self._take(2)
        else:  # until the server closes
            while self._fill():
                pass
            body, self.buf = self.buf, b""
        return version, int(status), headers, body


def _sse_data(body: bytes) -> list[str]:
    return [line[len("data: "):] for line in body.decode().splitlines() if line.startswith("data: ")]


def test_chunked_body_over_the_cap_is_413_without_buffering(server):
    """1 GiB of chunks offered: the server answers 413 once it passes the 8 MiB cap and stops
    reading; the client cannot push much past the cap plus the socket buffers."""
    s = _connect(server.port)
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {server.auth['Authorization']}\r\n"
               "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
    sent = 0
    stop = threading.Event()

    def push():
        nonlocal sent
        chunk = b"10000\r\n" + b"x" * 65536 + b"\r\n"
        try:
            for _ in range(16384):
                if stop.is_set():
                    break
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
    t = threading.Thread(target=push, daemon=True)
    t0 = time.monotonic()
    t.start()
    version, status, headers, body = _Reader(s).response()
    took = time.monotonic() - t0
    stop.set()
    s.close()
    t.join(10)
    assert status == 413, body[:300]
    assert json.loads(body)["error"]["type"] == "request_too_large"
    assert headers.get("connection") == "close"
    assert took < 10
    assert sent < 48 << 20, f"{sent} bytes went in: the body was read past the cap"
    assert http("GET", server.base_url + "/health", timeout=10)[0] == 200


def test_slow_header_flood_does_not_starve_health_or_streams(server, client, model_name):
    """200 sockets sending their headers a byte a second (more than any thread count of the
    old server): /health and a streamed chat keep answering quickly."""
    socks = []
    for _ in range(200):
        socks.append(_connect(server.port))
    stop = threading.Event()

    def trickle():
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
        i = 0
        while not stop.is_set() and i < len(head):
            for s in socks:
                try:
                    s.send(head[i:i + 1])
                except OSError:
                    pass
            i += 1
            stop.wait(1.0)
    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        time.sleep(1.5)
        for _ in range(3):
            t0 = time.monotonic()
            status, _, _ = http("GET", server.base_url + "/health", timeout=5)
            assert status == 200
            assert time.monotonic() - t0 < 1.0
        t0 = time.monotonic()
        stream = client.chat.completions.create(model=model_name, stream=True, max_tokens=8, temperature=0,
                                                messages=[{"role": "user", "content": "Say hi"}])
        first = None
        n = 0
        for chunk in stream:
            if first is None:
                first = time.monotonic() - t0
            n += 1
        assert first is not None and first < 5.0, first
        assert n >= 2
    finally:
        stop.set()
        t.join(5)
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def capped(request):
    """A server of its own: 8 connections, a 2 s header deadline."""
    from conftest import _start, _stop
    srv = _start(["-c", "4096", "--max-model-len", "2048", "--max-connections", "8", "--header-timeout", "2"])
    yield srv
    _stop(srv, request)


def test_connection_cap_503_health_and_streams_unaffected(capped):
    srv = capped
    # An established stream first.
    stream_sock = _connect(srv.port)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 64, "ignore_eos": True, "stream": True}).encode()
    stream_sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {srv.auth['Authorization']}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
    got: dict = {}

    def read_stream():
        try:
            got["resp"] = _Reader(stream_sock).response()
        except Exception as e:  # noqa: BLE001
            got["error"] = repr(e)
    reader = threading.Thread(target=read_stream, daemon=True)
    reader.start()
    time.sleep(0.3)
    # Fill the cap with idle sockets (their header deadline is 2 s: work fast).
    held = [_connect(srv.port) for _ in range(7)]
    time.sleep(0.2)
    try:
        s = _connect(srv.port)
        s.sendall(f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: {srv.auth['Authorization']}\r\n\r\n".encode())
        r = _Reader(s)
        version, status, headers, raw = r.response()
        assert status == 503, raw[:300]
        err = json.loads(raw)["error"]
        assert "too many open connections" in err["message"] and "8" in err["message"]
        assert headers.get("retry-after") == "1"
        assert headers.get("connection") == "close"
        s.close()
        s = _connect(srv.port)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        version, status, headers, raw = _Reader(s).response()
        assert status == 200, raw[:300]
        s.close()
    finally:
        for h in held:
            h.close()
    reader.join(60)
    assert "resp" in got, got.get("error")
    _, status, headers, raw = got["resp"]
    assert status == 200 and headers.get("transfer-encoding") == "chunked"
    data = _sse_data(raw)
    assert data[-1] == "[DONE]", data[-3:]
    assert sum(1 for d in data[:-1] for c in json.loads(d)["choices"] if c.get("text")) >= 32
    stream_sock.close()


def test_header_deadline_closes_slow_sockets(capped):
    srv = capped
    s = _connect(srv.port)
    t0 = time.monotonic()
    closed = False
    for b in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n":
        try:
            s.send(bytes([b]))
            s.settimeout(0.25)
            if s.recv(1) == b"":
                closed = True
                break
        except socket.timeout:
            continue
        except OSError:
            closed = True
            break
    took = time.monotonic() - t0
    s.close()
    assert closed, "the slow socket was not closed"
    assert 1.5 < took < 6, took  # the 2 s deadline is for the whole head, not per byte
    assert http("GET", srv.base_url + "/health", timeout=5)[0] == 200


def test_pipelined_requests_answered_in_order(server, model_name):
    body = json.dumps({"model": model_name, "prompt": "Hello", "max_tokens": 3, "temperature": 0}).encode()
    auth = server.auth["Authorization"]
    s = _connect(server.port)
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body +
              f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n".encode() +
              b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    r = _Reader(s)
    answers = [r.response() for _ in range(3)]
    s.close()
    assert [a[1] for a in answers] == [200, 200, 200]
    assert json.loads(answers[0][3])["object"] == "text_completion"
    assert json.loads(answers[1][3])["object"] == "list"
    assert json.loads(answers[2][3]) == {"status": "ok"}


def test_http10_answered_as_10_without_chunking(server):
    s = _connect(server.port)
    s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
    version, status, headers, body = _Reader(s).response()
    s.close()
    assert (version, status) == ("HTTP/1.0", 200)
    assert "transfer-encoding" not in headers
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 6, "stream": True}).encode()
    s = _connect(server.port)
    s.sendall((f"POST /v1/completions HTTP/1.0\r\nAuthorization: {server.auth['Authorization']}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
    r = _Reader(s)
    version, status, headers, raw = r.response()
    assert r.closed, "a streamed answer to HTTP/1.0 ends with the connection"
    s.close()
    assert (version, status) == ("HTTP/1.0", 200)
    assert "transfer-encoding" not in headers and headers.get("connection") == "close"
    data = _sse_data(raw)
    assert data[-1] == "[DONE]", raw[-300:]
    assert all("choices" in json.loads(d) for d in data[:-1])


def test_wrong_method_405(server):
    for method, path, allow in [("DELETE", "/v1/chat/completions", "POST"), ("POST", "/health", "GET"),
                                ("PUT", "/v1/models", "GET"), ("GET", "/v1/messages", "POST")]:
        r = httpx.request(method, server.base_url + path, headers=server.auth, timeout=10)
        assert r.status_code == 405, (method, path, r.text)
        assert r.headers["allow"] == allow
        assert r.json()["error"]["message"]  # OpenAI's shape, or Anthropic's on /v1/messages
    assert httpx.get(server.base_url + "/v1/nope", timeout=10).status_code == 404


def test_port_in_use_fails_clearly(server):
    t0 = time.monotonic()
    p = subprocess.run([str(server.binary), "serve", "-m", str(server.model), "--host", "127.0.0.1",
                        "--port", str(server.port)], capture_output=True, timeout=60)
    out = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode != 0, out
    assert str(server.port) in out and "in use" in out, out
    assert time.monotonic() - t0 < 30  # it fails before loading the model
    assert http("GET", server.base_url + "/health", timeout=5)[0] == 200


def test_log_injection_is_escaped(start_server, tmp_path):
    access = tmp_path / "access.log"
    srv = start_server(["-c", "4096", "--max-model-len", "2048", "--access-log", str(access)])
    s = _connect(srv.port)
    s.sendall(b"GET /v1/x%0a[error]%20forged%0d%1b[2J HTTP/1.1\r\nHost: x\r\nUser-Agent: ua\r\n"
              b"Connection: close\r\n\r\n")
    _, status, _, _ = _Reader(s).response()
    s.close()
    assert status == 404
    time.sleep(0.3)
    log = open(srv.log_path, "rb").read().decode("utf-8", "replace")
    assert "\x1b" not in log
    assert not any(line.startswith("[error] forged") for line in log.splitlines()), log[-2000:]
    assert "/v1/x\\n[error] forged\\r\\x1b[2J 404" in log, log[-2000:]
    lines = [json.loads(line) for line in access.read_text().splitlines()]
    entry = [e for e in lines if e["path"].startswith("/v1/x")]
    assert entry and entry[0]["path"] == "/v1/x\n[error] forged\r\x1b[2J" and entry[0]["status"] == 404
    assert b"\x1b" not in access.read_bytes()  # escaped inside the JSON string


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def test_streams_and_idle_connections_hold_no_thread(server):
    """Twelve streams in flight and a hundred idle connections: the server's thread count does
    not move (cpp-httplib held one thread per connection)."""
    base = _threads(server.proc.pid)
    idle = [_connect(server.port) for _ in range(100)]
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": True, "stream": True}).encode()
    socks = []
    for _ in range(12):
        s = _connect(server.port)
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {server.auth['Authorization']}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        socks.append(s)
    for s in socks:  # every stream has started
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    during = _threads(server.proc.pid)
    for s in socks + idle:
        s.close()
    assert during <= base, (base, during)
    assert http("GET", server.base_url + "/health", timeout=5)[0] == 200
