"""The OpenAI-compatible server against a real HTTP client on 127.0.0.1 (tiny GPT-2)."""

import json
import threading
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from trnsim.cli.http_server import LATENCY_HEADER, build_engine, create_app  # noqa: E402

CONFIG = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 260,
          "n_positions": 64, "bos_token_id": 258, "eos_token_id": 259}


class Server:
    def __init__(self, app):
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                                    log_level="error",
                                                    timeout_graceful_shutdown=300))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        for _ in range(500):  # bounded wait for start-up
            if self.server.started:
                break
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(300)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(CONFIG))
    engine, tokenizer, name = build_engine(str(path), instance="inf2.xlarge", tp=1, lnc=None,
                                           auto_cast="none", max_batch=4, queue_size=8,
                                           max_length=64)
    yield engine, tokenizer, name
    engine.stop()


@pytest.fixture(scope="module")
def server(engine):
    with Server(create_app(*engine, timeout_s=300)) as running:
        yield running


def test_completion_returns_real_tokens_and_device_latency(server, engine):
    ids = [5, 6, 7, 8]
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": ids, "max_tokens": 5,
                                                         "temperature": 0}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert float(r.headers[LATENCY_HEADER]) == pytest.approx(body["usage"]["device_latency_ms"],
                                                             rel=1e-6)
    assert body["usage"]["device_latency_ms"] > body["usage"]["device_ttft_ms"] > 0
    # greedy tokens equal the model's own greedy continuation
    import torch

    model = engine[0].logits.model
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, 4, dtype=torch.long),
                             max_new_tokens=5, do_sample=False, pad_token_id=259)
    expected = out[0, 4:].tolist()
    got = body["choices"][0]["token_ids"]
    assert got == expected[:len(got)]
    assert body["usage"]["completion_tokens"] == len(got)


def test_chat_streaming_matches_the_unstreamed_answer(server):
    payload = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
               "temperature": 0}
    plain = httpx.post(f"{server.url}/v1/chat/completions", json=payload, timeout=300).json()
    events = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions",
                      json=payload | {"stream": True}, timeout=300) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == plain["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]


def test_concurrent_requests_are_batched(server, engine):
    before = engine[0].batches
    with httpx.Client(timeout=300) as client:
        results = []

        def one(i):
            results.append(client.post(f"{server.url}/v1/completions",
                                       json={"prompt": [10 + i], "max_tokens": 3,
                                             "temperature": 0}).status_code)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert results == [200] * 4
    assert engine[0].batches - before < 4  # at least two shared a batch


@pytest.mark.parametrize(("payload", "fragment"), [
    ({"prompt": [5], "max_tokens": 0}, "max_tokens"),
    ({"prompt": [999]}, "outside the vocabulary"),
    ({"prompt": [5], "max_tokens": 100}, "compiled length"),
    ({"messages": "hello"}, "messages"),
    ({"prompt": [5], "n": 2}, "n=1"),
])
def test_bad_requests_get_a_clean_400(server, payload, fragment):
    chat = "messages" in payload
    r = httpx.post(f"{server.url}/v1/{'chat/' if chat else ''}completions", json=payload,
                   timeout=30)
    assert r.status_code == 400
    assert fragment in r.json()["error"]["message"]


def test_not_json_and_oversized_bodies(server):
    r = httpx.post(f"{server.url}/v1/completions", content=b"{nope", timeout=30)
    assert r.status_code == 400
    r = httpx.post(f"{server.url}/v1/completions", content=b"x" * (2 << 20), timeout=30)
    assert r.status_code == 413


def test_overload_is_answered_429_and_shutdown_loses_nothing(engine, monkeypatch):
    eng, tokenizer, name = engine
    app = create_app(eng, tokenizer, name, timeout_s=300)
    statuses, lock = [], threading.Lock()
    before = eng.submitted
    with Server(app) as srv:
        def one(i):
            r = httpx.post(f"{srv.url}/v1/completions",
                           json={"prompt": [20 + i], "max_tokens": 4, "temperature": 0},
                           timeout=300)
            with lock:
                statuses.append((r.status_code, len(r.json()["choices"][0]["token_ids"])
                                 if r.status_code == 200 else None))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 300
        while eng.submitted - before + len(statuses) < 24 and time.monotonic() < deadline:
            time.sleep(0.02)  # every request accepted (queued) or already answered
        srv.server.should_exit = True  # graceful: in-flight requests still get their answers
        for t in threads:
            t.join(300)
    codes = [c for c, _ in statuses]
    assert len(statuses) == 24  # every request answered
    assert set(codes) <= {200, 429}
    assert 429 in codes  # 24 at once overflow a queue of 8 behind a batch of 4
    assert all(n is not None and n > 0 for c, n in statuses if c == 200)


def test_stopped_engine_answers_503(engine):
    from trnsim.perf.serving.engine import EngineStopped, Job
    from trnsim.perf.serving.tokens import Sampling

    eng = engine[0]

    class Stopped:
        accepting = False
        completed = batches = 0

        def submit(self, job):
            raise EngineStopped("the server is shutting down")

    with Server(create_app(Stopped(), engine[1], engine[2])) as srv:
        r = httpx.post(f"{srv.url}/v1/completions", json={"prompt": [5]}, timeout=30)
        assert r.status_code == 503
        assert httpx.get(f"{srv.url}/health", timeout=30).status_code == 503
    assert eng.accepting
    del Job, Sampling
