"""Start and stop a real `hindsight serve` process; small HTTP and /metrics helpers.

Used by tests/e2e/conftest.py and by the serving benchmarks (bench/serve_bench.py,
bench/fairness.py); standard library only, so any Python 3.9+ can import it.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = ROOT / "build/bin/hindsight"
DEFAULT_MODEL = ROOT / "models/smollm2-135m-instruct-q4_1.gguf"


def hs_bin() -> Path:
    return Path(os.environ.get("HS_BIN", DEFAULT_BIN))


def hs_model() -> Path:
    return Path(os.environ.get("HS_MODEL", DEFAULT_MODEL))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body=None, headers=None, timeout: float = 30.0):
    """One request with urllib: (status, headers, body bytes). Never raises on HTTP status."""
    data = None
    hdrs = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text → {name: [(labels, value), ...]} (comments skipped)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        labels: dict[str, str] = {}
        if "{" in head:
            name, _, rest = head.partition("{")
            rest = rest.rstrip("}")
            # label values here never contain '",' sequences; split on them
            for part in filter(None, rest.split('",')):
                k, _, v = part.partition("=")
                labels[k.strip()] = v.strip().strip('"')
        else:
            name = head
        try:
            out.setdefault(name, []).append((labels, float(value)))
        except ValueError:
            pass
    return out


def metric_value(metrics: dict, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`; KeyError when absent."""
    if name not in metrics:
        raise KeyError(name)
    return sum(v for lab, v in metrics[name] if all(lab.get(k) == want for k, want in labels.items()))


class ServerProcess:
    """A `hindsight serve` child process on 127.0.0.1:port with its log in a file."""

    def __init__(self, args: list[str], *, binary: Path | None = None, model: Path | None = None,
                 api_key: str | None = "test-key", served_model_name: str = "smollm2",
                 port: int | None = None, threads: int | None = None, log_dir: str | None = None):
        self.binary = Path(binary or hs_bin())
        self.model = Path(model or hs_model())
        self.api_key = api_key
        self.served_model_name = served_model_name
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        threads = threads if threads is not None else int(os.environ.get("HS_E2E_THREADS", "0"))
        self.cmd = [str(self.binary), "serve", "-m", str(self.model), "--host", "127.0.0.1",
                    "--port", str(self.port), "--served-model-name", served_model_name]
        if api_key:
            self.cmd += ["--api-key", api_key]
        if threads:
            self.cmd += ["-t", str(threads)]
        self.cmd += list(args)
        # HS_SERVE_EXTRA_ARGS (e.g. "--device cuda"): appended to every server the tests start.
        self.cmd += os.environ.get("HS_SERVE_EXTRA_ARGS", "").split()
        fd, self.log_path = tempfile.mkstemp(prefix="hindsight-serve-", suffix=".log", dir=log_dir)
        os.close(fd)
        self.proc: subprocess.Popen | None = None
        self.health_seen: list[tuple[int, bytes]] = []  # /health answers while starting

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def start(self, timeout: float = 120.0) -> "ServerProcess":
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} before it was ready\n"
                                   f"command: {' '.join(self.cmd)}\n{self.log_tail()}")
            try:
                status, _, body = http("GET", self.base_url + "/health", timeout=2)
                last = status
                self.health_seen.append((status, body))
                if status == 200:
                    return self
            except OSError as e:  # not listening yet
                last = e
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not ready within {timeout:.0f} s (last: {last})\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        return self.proc.returncode

    def log_tail(self, lines: int = 60) -> str:
        try:
            with open(self.log_path, "rb") as f:
                tail = deque(f, maxlen=lines)
        except OSError:
            return "(no server log)"
        return "---- server log tail (" + self.log_path + ") ----\n" + \
            b"".join(tail).decode("utf-8", "replace")

    def get(self, path: str, **kw):
        return http("GET", self.base_url + path, headers=self.auth, **kw)

    def post(self, path: str, body, **kw):
        return http("POST", self.base_url + path, body=body, headers=self.auth, **kw)

    def metrics(self) -> dict:
        status, _, body = http("GET", self.base_url + "/metrics", headers=self.auth, timeout=10)
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}: {body[:200]!r}")
        return parse_metrics(body.decode())

    def tokenize(self, prompt: str, **extra) -> list[int]:
        status, _, body = self.post("/tokenize", {"prompt": prompt, **extra})
        if status != 200:
            raise RuntimeError(f"/tokenize answered {status}: {body[:300]!r}")
        return json.loads(body)["tokens"]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
