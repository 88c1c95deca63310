"""`/v1/embeddings` for an encoder (tiny BERT) against a real HTTP client on 127.0.0.1."""

import json
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from trnsim.cli.http_server import LATENCY_HEADER, build_engine, create_app  # noqa: E402

from .test_http_server import Server  # noqa: E402

CONFIG = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 300,
          "max_position_embeddings": 64, "type_vocab_size": 2}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("encoder") / "config.json"
    path.write_text(json.dumps(CONFIG))
    engine, tokenizer, name = build_engine(str(path), instance="inf2.xlarge", tp=1, lnc=None,
                                           auto_cast="none", max_batch=4, queue_size=8,
                                           max_length=32)
    yield engine, tokenizer, name
    engine.stop()


@pytest.fixture(scope="module")
def server(engine):
    with Server(create_app(*engine, timeout_s=300)) as running:
        yield running


def reference(engine, ids):
    """Mean of the last hidden states of the model run eagerly in torch (fp32)."""
    model = engine[0].encoder.model
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    return hidden.mean(0)


def test_embeddings_of_a_batch_equal_each_input_run_alone(server, engine):
    texts = ["hello", "a longer input sentence", "x"]
    with httpx.Client(timeout=300) as client:
        response = client.post(f"{server.url}/v1/embeddings",
                               json={"model": "tiny", "input": texts})
    assert response.status_code == 200, response.text
    data = response.json()
    assert [d["index"] for d in data["data"]] == [0, 1, 2]
    for text, item in zip(texts, data["data"], strict=True):
        vector = torch.tensor(item["embedding"])
        assert vector.shape == (32,)  # padding rows and positions do not leak into a vector
        torch.testing.assert_close(vector, reference(engine, list(text.encode())),
                                   rtol=1e-4, atol=1e-4)
    assert data["usage"]["prompt_tokens"] == sum(len(t) for t in texts)
    latency = float(response.headers[LATENCY_HEADER])
    assert latency > 0 and data["usage"]["device_latency_ms"] == pytest.approx(latency, abs=1e-5)


def test_concurrent_requests_are_all_answered_with_their_own_vectors(server, engine):
    ids = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
    results = {}

    def ask(i):
        with httpx.Client(timeout=300) as client:
            results[i] = client.post(f"{server.url}/v1/embeddings", json={"input": ids[i]})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for i, row in enumerate(ids):
        assert results[i].status_code == 200
        vector = torch.tensor(results[i].json()["data"][0]["embedding"])
        torch.testing.assert_close(vector, reference(engine, row), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("body, message", [
    ({"input": [1, 2, 999]}, "outside the vocabulary"),
    ({"input": []}, "input must be"),
    ({"input": "a" * 40}, "compiled length 32"),
    ({"input": ["a"] * 5}, "batch of 4"),
    ({"input": "a", "encoding_format": "base64"}, "encoding_format"),
])
def test_bad_embedding_requests_get_a_400(server, body, message):
    with httpx.Client(timeout=300) as client:
        response = client.post(f"{server.url}/v1/embeddings", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def test_an_encoder_refuses_completions(server):
    with httpx.Client(timeout=300) as client:
        response = client.post(f"{server.url}/v1/completions", json={"prompt": "hi"})
    assert response.status_code == 400 and "encoder" in response.json()["error"]["message"]
