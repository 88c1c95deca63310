"""`trnsim serve MODEL --port N`: an OpenAI-compatible HTTP server (FastAPI on uvicorn) whose
answers come from the model compiled and run on trnsim.

Routes: ``/v1/completions`` and ``/v1/chat/completions`` (streamed as server-sent events with
``"stream": true``) for a causal LM, ``/v1/embeddings`` for an encoder (BERT-like: mean-pooled
vectors, `trnsim.perf.serving.embeddings`), ``/v1/models``, ``/health``. Each answer carries the
simulated device time of its batch in the ``x-trnsim-device-latency-ms`` header and in ``usage``.
Limits: a request body over `MAX_BODY_BYTES` is refused (413), a full queue answers 429, a
server shutting down 503, a request not answered within the timeout 504; malformed requests get
a 400 in OpenAI's error shape. Shutdown (Ctrl-C, SIGTERM) stops accepting connections and
finishes the requests it holds before exiting.
"""


import asyncio
import json
import time
import uuid
from typing import Any

from trnsim.errors import InvalidArgumentError, TrnsimError

MAX_BODY_BYTES = 1 << 20  # a prompt of the longest compiled length fits many times over
MAX_TOKENS_DEFAULT = 16  # OpenAI's completions default
LATENCY_HEADER = "x-trnsim-device-latency-ms"


async def _wait(job, finished, timeout_s: float):
    """Wait for a submitted job; the error response if it timed out (504) or failed (500)."""
    try:
        await asyncio.wait_for(finished.wait(), timeout_s)
    except asyncio.TimeoutError:
        return _error(504, f"no answer within {timeout_s} s", "timeout_error")
    if job.error:
        return _error(500, job.error, "server_error")
    return None


def _submit(engine, job):
    """Queue `job` on `engine`; the error response if it is refused (full queue: 429, stopping:
    503, bad request: 400), else None."""
    from trnsim.perf.serving.engine import EngineStopped, QueueFull

    try:
        engine.submit(job)
    except QueueFull as error:
        return _error(429, str(error), "rate_limit_error", headers={"Retry-After": "1"})
    except EngineStopped as error:
        return _error(503, str(error), "server_error")
    except InvalidArgumentError as error:
        return _error(400, str(error))
    return None


def _error(status: int, message: str, kind: str = "invalid_request_error", headers=None):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": kind, "param": None,
                                   "code": status}}, status_code=status, headers=headers)


def create_app(engine: Any, tokenizer: Any, model_name: str, *, timeout_s: float = 60.0,
               max_body_bytes: int = MAX_BODY_BYTES):
    """The ASGI app; starting and stopping `engine` is the caller's (see `run_server`)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    from trnsim.perf.serving.embeddings import EmbeddingEngine, EmbeddingJob
    from trnsim.perf.serving.engine import Job
    from trnsim.perf.serving.text import chat_prompt
    from trnsim.perf.serving.tokens import Sampling

    app = FastAPI(title=f"trnsim serving {model_name}")

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        if request.method == "POST":
            length = request.headers.get("content-length")
            if length is None:
                return _error(411, "send a Content-Length header")
            if not length.isdigit() or int(length) > max_body_bytes:
                return _error(413, f"request body {length} bytes exceeds the limit of "
                                   f"{max_body_bytes} bytes")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, error: RequestValidationError):
        return _error(400, "invalid request: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()))

    @app.get("/health")
    async def health():
        if not engine.accepting:
            return _error(503, "shutting down", "server_error")
        return {"status": "ok", "completed": engine.completed, "batches": engine.batches}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model",
                                            "owned_by": "trnsim"}]}

    async def body_of(request: Request) -> dict:
        try:
            body = json.loads(await request.body())
        except ValueError as error:
            raise InvalidArgumentError(f"the body is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise InvalidArgumentError("the body must be a JSON object")
        return body

    def sampling_of(body: dict) -> tuple[Sampling, int]:
        if int(body.get("n", 1) or 1) != 1:
            raise InvalidArgumentError("only n=1 is supported")
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens", MAX_TOKENS_DEFAULT))
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidArgumentError(f"max_tokens must be a positive integer; got {max_tokens!r}")
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None
                            else 1.0)
        top_p = float(body.get("top_p") if body.get("top_p") is not None else 1.0)
        top_k = int(body.get("top_k") if body.get("top_k") is not None else 0)
        seed = int(body.get("seed") if body.get("seed") is not None else 0)
        if temperature < 0:
            raise InvalidArgumentError(f"temperature must be >= 0; got {temperature}")
        sampling = Sampling(temperature > 0, temperature or 1.0, top_k, top_p, seed)
        if sampling.do_sample:
            sampling.check()
        return sampling, max_tokens

    def prompt_of(body: dict, chat: bool) -> list[int]:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and isinstance(m.get("content"), str)
                    and isinstance(m.get("role"), str) for m in messages):
                raise InvalidArgumentError("messages must be a non-empty list of {role, content} "
                                           "objects with string content")
            return tokenizer.encode(chat_prompt(messages))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return tokenizer.encode(prompt)
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            bad = [t for t in prompt if not 0 <= t < tokenizer.vocab_size]
            if bad:
                raise InvalidArgumentError(f"token {bad[0]} is outside the vocabulary "
                                           f"(0..{tokenizer.vocab_size - 1})")
            return prompt
        raise InvalidArgumentError("prompt must be a string or a list of token ids")

    def usage(job, prompt: list[int]) -> dict:
        return {"prompt_tokens": len(prompt), "completion_tokens": len(job.tokens),
                "total_tokens": len(prompt) + len(job.tokens),
                "device_latency_ms": round(job.device_ms, 6),
                "device_ttft_ms": round(job.ttft_device_ms, 6)}

    async def complete(request: Request, chat: bool):
        if isinstance(engine, EmbeddingEngine):
            return _error(400, f"{model_name} is an encoder: it serves /v1/embeddings, not "
                               f"completions")
        try:
            body = await body_of(request)
            prompt = prompt_of(body, chat)
            sampling, max_tokens = sampling_of(body)
        except (InvalidArgumentError, TypeError, ValueError) as error:
            return _error(400, str(error))
        loop = asyncio.get_running_loop()
        tokens: asyncio.Queue = asyncio.Queue()
        finished = asyncio.Event()
        stream = bool(body.get("stream"))
        job = Job(prompt, max_tokens, sampling,
                  on_token=(lambda t: loop.call_soon_threadsafe(tokens.put_nowait, t))
                  if stream else None,
                  on_done=lambda: loop.call_soon_threadsafe(finished.set))
        refused = _submit(engine, job)
        if refused is not None:
            return refused
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        kind = "chat.completion" if chat else "text_completion"
        if stream:
            return StreamingResponse(_events(job, tokens, finished, ident, created, kind, chat,
                                             prompt), media_type="text/event-stream")
        failed = await _wait(job, finished, timeout_s)
        if failed is not None:
            return failed
        text = tokenizer.decode(job.tokens)
        choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                   "finish_reason": job.finish_reason} if chat else
                  {"index": 0, "text": text, "logprobs": None,
                   "finish_reason": job.finish_reason, "token_ids": job.tokens})
        return JSONResponse({"id": ident, "object": kind, "created": created,
                             "model": model_name, "choices": [choice],
                             "usage": usage(job, prompt)},
                            headers={LATENCY_HEADER: f"{job.device_ms:.6f}"})

    async def _events(job, tokens, finished, ident, created, kind, chat, prompt):
        decoder = tokenizer.decoder()
        chunk_kind = "chat.completion.chunk" if chat else kind
        deadline = time.monotonic() + timeout_s

        def chunk(text: str | None, finish: str | None, extra: dict | None = None) -> str:
            if chat:
                delta = {"content": text} if text is not None else (
                    {} if finish else {"role": "assistant"})
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish}
            data = {"id": ident, "object": chunk_kind, "created": created, "model": model_name,
                    "choices": [choice], **(extra or {})}
            return f"data: {json.dumps(data)}\n\n"

        if chat:
            yield chunk(None, None)
        count = 0
        while True:
            getter = asyncio.ensure_future(tokens.get())
            done_wait = asyncio.ensure_future(finished.wait())
            await asyncio.wait({getter, done_wait}, timeout=max(deadline - time.monotonic(), 0),
                               return_when=asyncio.FIRST_COMPLETED)
            done_wait.cancel()
            if getter.done():
                count += 1
                yield chunk(tokenizer.piece(decoder, getter.result()), None)
                continue
            getter.cancel()
            if finished.is_set() and tokens.empty() and count >= len(job.tokens):
                break
            if time.monotonic() >= deadline:
                yield f"data: {json.dumps({'error': {'message': 'timeout', 'code': 504}})}\n\n"
                return
        tail = decoder.decode(b"", final=True)
        if job.error:
            yield f"data: {json.dumps({'error': {'message': job.error, 'code': 500}})}\n\n"
        else:
            yield chunk(tail or ("" if not chat else None), job.finish_reason,
                        {"usage": usage(job, prompt)})
        yield "data: [DONE]\n\n"

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await complete(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await complete(request, chat=True)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        if not isinstance(engine, EmbeddingEngine):
            return _error(400, f"{model_name} is a causal LM: /v1/embeddings serves encoders "
                               f"only")
        try:
            body = await body_of(request)
            rows = embedding_inputs(body.get("input"), tokenizer)
            if body.get("encoding_format", "float") != "float":
                raise InvalidArgumentError("encoding_format: only 'float' is supported")
        except (InvalidArgumentError, TypeError, ValueError) as error:
            return _error(400, str(error))
        loop = asyncio.get_running_loop()
        finished = asyncio.Event()
        job = EmbeddingJob(rows, on_done=lambda: loop.call_soon_threadsafe(finished.set))
        refused = _submit(engine, job)
        if refused is not None:
            return refused
        failed = await _wait(job, finished, timeout_s)
        if failed is not None:
            return failed
        tokens = sum(len(r) for r in rows)
        return JSONResponse({"object": "list", "model": model_name, "data": [
            {"object": "embedding", "index": i, "embedding": v}
            for i, v in enumerate(job.vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens,
                      "device_latency_ms": round(job.device_ms, 6)}},
            headers={LATENCY_HEADER: f"{job.device_ms:.6f}"})

    return app


def embedding_inputs(value: Any, tokenizer: Any) -> list[list[int]]:
    """OpenAI's embeddings ``input``: a string, a list of strings, a list of token ids, or a
    list of such lists; as token-id rows."""
    def ids(row: list) -> list[int]:
        bad = [t for t in row if not isinstance(t, int) or not 0 <= t < tokenizer.vocab_size]
        if bad:
            raise InvalidArgumentError(f"token {bad[0]!r} is outside the vocabulary "
                                       f"(0..{tokenizer.vocab_size - 1})")
        return row

    if isinstance(value, str):
        return [tokenizer.encode(value)]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return [tokenizer.encode(v) for v in value]
        if all(isinstance(v, int) for v in value):
            return [ids(value)]
        if all(isinstance(v, list) for v in value):
            return [ids(v) for v in value]
    raise InvalidArgumentError("input must be a string, a list of strings, a list of token ids "
                               "or a list of token-id lists")


def build_engine(model: str, *, instance: str, tp: int, lnc: int | None,
                 auto_cast: str | None, max_batch: int, queue_size: int,
                 max_length: int | None = None, weights: str | None = None, quiet: bool = True):
    """The engine for `model` (real weights: seeded random, or a safetensors file) with its
    byte tokenizer; compiles every bucket before returning."""
    from trnsim.cli.generate import _real_model, step_timer
    from trnsim.perf.serving.buckets import power_of_two_buckets
    from trnsim.perf.serving.embeddings import is_encoder
    from trnsim.perf.serving.engine import Engine
    from trnsim.perf.serving.steps import SequenceLogits
    from trnsim.perf.serving.text import ByteTokenizer

    if is_encoder(model):
        return build_encoder_engine(model, instance=instance, tp=tp, lnc=lnc,
                                    auto_cast=auto_cast, max_batch=max_batch,
                                    queue_size=queue_size, max_length=max_length)
    source, timer = step_timer(model, instance, tp, lnc, auto_cast, quiet)
    length = max_length or min(source.max_positions or 128, 128)
    real = _real_model(source, weights)
    logits = SequenceLogits(real, timer.deployment, power_of_two_buckets(length))
    eos = real.config.eos_token_id
    engine = Engine(logits, timer, max_batch=max_batch, max_length=length,
                    queue_size=queue_size, eos_token_id=eos if isinstance(eos, int) else None)
    engine.start()
    return engine, ByteTokenizer(int(real.config.vocab_size)), source.name


def build_encoder_engine(model: str, *, instance: str, tp: int, lnc: int | None,
                         auto_cast: str | None, max_batch: int, queue_size: int,
                         max_length: int | None = None):
    """The embedding engine of an encoder `model` (seeded random weights, fp32) with the byte
    tokenizer; compiles every bucket before returning."""
    import torch

    from trnsim import hardware
    from trnsim.perf.serving.buckets import power_of_two_buckets
    from trnsim.perf.serving.embeddings import EmbeddingEngine, PooledEncoder
    from trnsim.perf.serving.steps import Deployment
    from trnsim.perf.serving.text import ByteTokenizer
    from trnsim.perf.zoo import zoo_model

    entry = zoo_model(model)
    real = entry.build().to(torch.float32).eval()
    config = real.config
    limit = getattr(config, "max_position_embeddings", None) or 128
    length = max_length or min(limit, 128)
    if length > limit:
        raise InvalidArgumentError(f"--max-length {length} exceeds {entry.name}'s "
                                   f"max_position_embeddings ({limit})")
    spec = hardware.instance(instance)
    encoder = PooledEncoder(real, Deployment(spec.name, tp, lnc, auto_cast),
                            power_of_two_buckets(length), max_batch)
    engine = EmbeddingEngine(encoder, queue_size=queue_size, max_length=length)
    engine.start()
    return engine, ByteTokenizer(int(config.vocab_size)), entry.name


def run_server(model: str, *, host: str, port: int, instance: str, tp: int, lnc: int | None,
               auto_cast: str | None, max_batch: int, queue_size: int, timeout_s: float) -> None:
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1"):
        from trnsim.cli.app import err_console

        err_console().print(f"warning: serving on {host}, reachable beyond this machine")
    engine, tokenizer, name = build_engine(model, instance=instance, tp=tp, lnc=lnc,
                                           auto_cast=auto_cast, max_batch=max_batch,
                                           queue_size=queue_size, quiet=False)
    app = create_app(engine, tokenizer, name, timeout_s=timeout_s)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning",
                    timeout_graceful_shutdown=timeout_s)
    except OSError as error:
        raise TrnsimError(f"cannot serve on {host}:{port}: {error}") from None
    finally:
        engine.stop()
