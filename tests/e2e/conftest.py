"""End-to-end tests against a real `hindsight serve` on SmolLM2-135M-Instruct.

One server for the session (HS_BIN, default build/bin/hindsight; HS_MODEL, default
models/smollm2-135m-instruct-q4_1.gguf), on a free port with small settings; every test
talks to it over HTTP. Tests that need other flags start their own with `start_server`.
All e2e tests are skipped when the model file is absent (scripts/setup fetches it). When a
test fails, the tail of each live server's log is attached to its report.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hs_server import ServerProcess, hs_bin, hs_model  # noqa: E402

API_KEY = "test-key"
MODEL_NAME = "smollm2-e2e"
# Small settings: 16K tokens of KV, 4K per request, 16 running sequences.
MAIN_ARGS = ["-c", "16384", "--max-model-len", "4096", "--max-num-seqs", "16",
             "--max-num-batched-tokens", "512", "--request-timeout", "120"]

_live: list[ServerProcess] = []


def _require_files():
    if not hs_model().is_file():
        pytest.skip(f"model {hs_model()} is absent (run scripts/setup)")
    if not hs_bin().is_file():
        pytest.fail(f"server binary {hs_bin()} is absent (make build, or set HS_BIN)")


def _start(args: list[str], **kw) -> ServerProcess:
    _require_files()
    kw.setdefault("api_key", API_KEY)
    kw.setdefault("served_model_name", MODEL_NAME)
    srv = ServerProcess(args, **kw)
    srv.start(timeout=120)
    _live.append(srv)
    return srv


def _stop(srv: ServerProcess, request) -> None:
    rc = srv.stop()
    _live.remove(srv)
    failed = request.session.testsfailed > 0
    if failed or rc not in (0, None, -15):
        print(f"\n[server on port {srv.port} exited with {rc}]\n{srv.log_tail()}")
    else:
        os.unlink(srv.log_path)


QWEN_MODEL = Path(__file__).resolve().parents[2] / "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_MODEL_NAME = "qwen-e2e"


@pytest.fixture(scope="session")
def qwen(request) -> ServerProcess:
    """One Qwen2.5-Coder-0.5B-Instruct server for every module that needs a tool-calling model
    (tool calls, structured output, /v1/messages, /v1/responses); skipped when it is absent."""
    if not QWEN_MODEL.is_file():
        pytest.skip(f"{QWEN_MODEL} is absent (scripts/setup fetches it)")
    srv = _start(["-c", "8192", "--max-model-len", "4096", "--request-timeout", "120"], model=QWEN_MODEL,
                 served_model_name=QWEN_MODEL_NAME)
    yield srv
    _stop(srv, request)


@pytest.fixture(scope="session")
def server(request) -> ServerProcess:
    srv = _start(MAIN_ARGS)
    yield srv
    _stop(srv, request)


@pytest.fixture(scope="session")
def base_url(server) -> str:
    return server.base_url


@pytest.fixture(scope="session")
def model_name() -> str:
    return MODEL_NAME


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def async_client_factory(server):
    import openai

    def make():
        return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    return make


@pytest.fixture
def start_server(request):
    """Factory: start_server(extra_args) → a ServerProcess stopped when the test ends."""
    started: list[ServerProcess] = []

    def start(args: list[str], **kw) -> ServerProcess:
        srv = _start(args, **kw)
        started.append(srv)
        return srv
    yield start
    for srv in started:
        _stop(srv, request)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _live:
        for srv in _live:
            rep.sections.append((f"server log (port {srv.port})", srv.log_tail(40)))
