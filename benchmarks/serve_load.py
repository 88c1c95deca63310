"""A bounded load test of `trnsim serve MODEL --port N` on 127.0.0.1: requests/s held, errors, and
that nothing is lost (every request sent gets exactly one answer).

    python benchmarks/serve_load.py [--requests 200] [--concurrency 16] [--max-tokens 4]

Serves a tiny GPT-2 built from its config (random weights, fp32) with dynamic batching, sends
`--requests` completions from `--concurrency` client threads, and prints one JSON object.
Overload answers (429) and timeouts (504) are counted apart from errors: they are the server's
bounded queue and deadline at work.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from trnsim.cli.http_server import build_engine, create_app

CONFIG = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 260,
          "n_positions": 64, "bos_token_id": 258, "eos_token_id": 259}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--queue-size", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=600.0, help="server seconds per request")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(CONFIG))
        start = time.perf_counter()
        engine, tokenizer, name = build_engine(str(path), instance="inf2.xlarge", tp=1, lnc=None,
                                               auto_cast="none", max_batch=args.max_batch,
                                               queue_size=args.queue_size, max_length=64)
        startup_s = time.perf_counter() - start
    server = uvicorn.Server(uvicorn.Config(create_app(engine, tokenizer, name, timeout_s=args.timeout),
                                           host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/v1/completions"
    counts = {"ok": 0, "overloaded_429": 0, "timed_out_504": 0, "errors": 0}
    sent = [0]
    lock = threading.Lock()

    def client(index: int) -> None:
        with httpx.Client(timeout=args.timeout + 30) as http:
            while True:
                with lock:
                    if sent[0] >= args.requests:
                        return
                    sent[0] += 1
                    number = sent[0]
                try:
                    r = http.post(url, json={"prompt": [10 + number % 200],
                                             "max_tokens": args.max_tokens, "temperature": 0})
                    key = {200: "ok", 429: "overloaded_429", 504: "timed_out_504"}.get(
                        r.status_code, "errors")
                except httpx.HTTPError:
                    key = "errors"
                with lock:
                    counts[key] += 1

    start = time.perf_counter()
    clients = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    elapsed = time.perf_counter() - start
    server.should_exit = True
    thread.join(60)
    engine.stop()
    answered = sum(counts.values())
    print(json.dumps({"requests_sent": sent[0], "answered": answered,
                      "lost": sent[0] - answered, **counts,
                      "requests_per_s_held": round(counts["ok"] / elapsed, 2),
                      "seconds": round(elapsed, 2), "startup_s": round(startup_s, 2),
                      "concurrency": args.concurrency, "max_batch": args.max_batch,
                      "batches": engine.batches}, indent=2))


if __name__ == "__main__":
    main()
