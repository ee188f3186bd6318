"""`lumos serve`: an OpenAI-compatible HTTP server over one compiled `Batch`.

Routes: `GET /health`, `GET /v1/models`, `POST /v1/completions` and
`POST /v1/chat/completions` (`stream: true` sends server-sent events, `data: [DONE]` last).
The program is compiled (or loaded from the artifact cache) before the server listens.

Requests are batched continuously (`lumos.batch.Batch`): each running request holds a
row of a batched KV cache, every step decodes one token of each, and a request that
arrives is prefilled between two steps and joins the next one; beyond the batch's rows
requests wait in arrival order. A streaming client's tokens go out as they are made. A
request whose client has gone is dropped between two steps, freeing its row. Bad
requests get a 4xx JSON error in OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`) and the server goes on.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos.batch import Batch
from lumos.generate import Sampling, TextStream, render_chat, sample


class RequestError(Exception):
    """A request the server refuses: an HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param,
                          "code": self.code}}


@dataclass
class Job:
    """One request's generation: the tokens go to `out` on the server's event loop as
    (token, None), and last (None, finish_reason) or (None, an exception)."""

    ids: list[int]
    max_tokens: int
    sampling: Sampling
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def put(self, item: tuple[int | None, Any]) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, item)


@dataclass
class Running:
    """A job holding a row of the batch: its sequence, the tokens so far, its sampler."""

    job: Job
    seq: int
    history: list[int]
    rng: np.random.Generator
    made: int = 0
    last: int = -1  # the token to feed next


class Engine:
    """The compiled model and the thread that runs the jobs, batched."""

    def __init__(self, name: str, batch: Batch, tokenizer: Any, chat_template: str | None,
                 bos_token: str = "", eos_token: str = "",
                 stop_ids: frozenset[int] = frozenset()) -> None:
        self.name, self.batch, self.tokenizer = name, batch, tokenizer
        self.max_context = batch.max_context
        self.chat_template, self.bos_token, self.eos_token = chat_template, bos_token, eos_token
        self.stop_ids = stop_ids
        self.created = int(time.time())
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._work, name="lumos-engine", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.jobs.put(None)

    def _work(self) -> None:
        running: dict[int, Running] = {}
        while True:
            while len(running) < self.batch.slots:  # new jobs join between two steps
                try:
                    job = self.jobs.get(block=not running)
                except queue.Empty:
                    break
                if job is None:
                    return
                if not job.cancelled.is_set():
                    self._start(job, running)
            if not running:
                continue
            try:
                logits = self.batch.step({q: r.last for q, r in running.items()})
            except Exception as e:  # reported to every request, the engine goes on
                for r in list(running.values()):
                    self._end(r, running, e)
                continue
            for q, r in list(running.items()):
                self._next(r, logits[q], running)

    def _start(self, job: Job, running: dict[int, Running]) -> None:
        seq = self.batch.open()
        r = Running(job, seq, list(job.ids), np.random.default_rng(job.sampling.seed))
        running[seq] = r
        try:
            logits = self.batch.feed(seq, job.ids)
        except Exception as e:
            self._end(r, running, e)
            return
        self._next(r, logits, running)

    def _next(self, r: Running, logits: np.ndarray, running: dict[int, Running]) -> None:
        """The token after `logits` to the job, or its end (as `Generator.generate`)."""
        if r.job.cancelled.is_set():
            return self._end(r, running, "cancelled")
        t = sample(logits, r.history, r.job.sampling, r.rng)
        if t in self.stop_ids:
            return self._end(r, running, "stop")
        r.job.put((t, None))
        r.made += 1
        r.history.append(t)
        r.last = t
        if r.made == r.job.max_tokens or self.batch.length(r.seq) >= self.max_context:
            self._end(r, running, "length")

    def _end(self, r: Running, running: dict[int, Running], end: Any) -> None:
        r.job.put((None, end))
        self.batch.close(r.seq)
        del running[r.seq]


# --- requests --------------------------------------------------------------------------

def _number(body: dict, key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
        raise RequestError(400, f"'{key}' must be a number in [{lo}, {hi}], got {v!r}", key)
    return float(v)


def _int(body: dict, key: str, default: int | None, lo: int) -> int | None:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise RequestError(400, f"'{key}' must be an integer >= {lo}, got {v!r}", key)
    return v


def _stops(body: dict) -> list[str]:
    v = body.get("stop")
    stops = [] if v is None else [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or len(stops) > 4 or \
            not all(isinstance(s, str) and s for s in stops):
        raise RequestError(400, "'stop' must be a non-empty string or a list of up to 4 "
                                "of them", "stop")
    return stops


@dataclass
class Request:
    """A validated completion request."""

    chat: bool
    ids: list[int]
    max_tokens: int
    sampling: Sampling
    stops: list[str]
    stream: bool
    include_usage: bool
    generated: int = 0  # tokens made so far


def parse(engine: Engine, body: Any, chat: bool) -> Request:
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model != engine.name:
        raise RequestError(404, f"the model {model!r} does not exist (serving "
                                f"{engine.name!r})", "model", "model_not_found")
    if _int(body, "n", 1, 1) != 1:
        raise RequestError(400, "'n' must be 1", "n")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and
                isinstance(m.get("content"), str) for m in messages):
            raise RequestError(400, "'messages' must be a non-empty list of {role, content} "
                                    "objects with string content", "messages")
        if not engine.chat_template:
            raise RequestError(400, f"the model {engine.name!r} has no chat template; use "
                                    "/v1/completions", "messages")
        try:
            text = render_chat(engine.chat_template, messages, engine.bos_token,
                               engine.eos_token)
        except ValueError as e:
            raise RequestError(400, str(e), "messages") from None
        limit = _int(body, "max_completion_tokens", None, 1)
        limit = _int(body, "max_tokens", limit, 1)
    else:
        text = body.get("prompt")
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
        if not isinstance(text, str):
            raise RequestError(400, "'prompt' must be a string", "prompt")
        limit = _int(body, "max_tokens", 16, 1)
    ids = engine.tokenizer.encode(text, add_special_tokens=not chat).ids  # a template has BOS
    room = engine.max_context - len(ids)
    if not ids:
        raise RequestError(400, "the prompt is empty", "messages" if chat else "prompt")
    if room < 1:
        raise RequestError(400, f"the prompt has {len(ids)} tokens; the context holds "
                                f"{engine.max_context}", "messages" if chat else "prompt",
                           "context_length_exceeded")
    sampling = Sampling(temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
                        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
                        seed=_int(body, "seed", None, 0))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, "'stream' must be a boolean", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError(400, "'stream_options' must be an object", "stream_options")
    return Request(chat, ids, min(limit or room, room), sampling, _stops(body), stream,
                   bool(options.get("include_usage")))


# --- responses -------------------------------------------------------------------------

async def pieces(engine: Engine, req: Request) -> AsyncIterator[tuple[str, str | None]]:
    """(text, None) as tokens arrive, held back while it may be the start of a stop
    string, and last ("", finish_reason). Counts the tokens in `req.generated`."""
    job = Job(req.ids, req.max_tokens, req.sampling, asyncio.get_running_loop())
    engine.jobs.put(job)
    stream, text, sent = TextStream(engine.tokenizer), "", 0
    hold = max((len(s) for s in req.stops), default=1) - 1
    try:
        while True:
            token, end = await job.out.get()
            if token is None:
                if isinstance(end, Exception):
                    raise end
                text_end = len(text)
                break
            req.generated += 1
            text += stream.push(token)
            hits = [i for i in (text.find(s) for s in req.stops) if i >= 0]
            if hits:
                end, text_end = "stop", min(hits)
                break
            if len(text) - hold > sent:
                yield text[sent:len(text) - hold], None
                sent = len(text) - hold
        if text_end > sent:
            yield text[sent:text_end], None
        yield "", end
    finally:
        job.cancelled.set()  # a client that went away frees the engine at the next token


def _usage(req: Request) -> dict[str, int]:
    n = req.generated
    return {"prompt_tokens": len(req.ids), "completion_tokens": n,
            "total_tokens": len(req.ids) + n}


def _chunk(engine: Engine, req: Request, rid: str, text: str | None,
           finish: str | None, first: bool = False) -> dict[str, Any]:
    if req.chat:
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else \
            ({"content": text} if text else {})
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        kind = "text_completion"
    return {"id": rid, "object": kind, "created": int(time.time()), "model": engine.name,
            "choices": [choice]}


async def complete(engine: Engine, req: Request) -> dict[str, Any]:
    text, finish = "", "length"
    async for piece, end in pieces(engine, req):
        text += piece
        finish = end or finish
    rid = ("chatcmpl-" if req.chat else "cmpl-") + uuid.uuid4().hex
    if req.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {"id": rid, "object": "chat.completion" if req.chat else "text_completion",
            "created": int(time.time()), "model": engine.name, "choices": [choice],
            "usage": _usage(req)}


async def events(engine: Engine, req: Request) -> AsyncIterator[str]:
    rid = ("chatcmpl-" if req.chat else "cmpl-") + uuid.uuid4().hex

    def sse(obj: dict[str, Any]) -> str:
        return f"data: {json.dumps(obj)}\n\n"

    if req.chat:
        yield sse(_chunk(engine, req, rid, None, None, first=True))
    try:
        async for piece, end in pieces(engine, req):
            if end is None:
                yield sse(_chunk(engine, req, rid, piece, None))
            else:
                yield sse(_chunk(engine, req, rid, None, end))
    except Exception as e:  # headers are sent: the error goes as an event
        yield sse(RequestError(500, f"generation failed: {e}").body())
        return
    if req.include_usage:
        yield sse({**_chunk(engine, req, rid, None, None), "choices": [], "usage": _usage(req)})
    yield "data: [DONE]\n\n"


def app(engine: Engine) -> Any:
    """The Starlette application serving `engine`."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request as HTTPRequest
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    def error(e: RequestError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    def endpoint(chat: bool) -> Callable:
        async def handle(request: HTTPRequest) -> Any:
            try:
                try:
                    body = json.loads(await request.body())
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise RequestError(400, "the request body is not valid JSON") from None
                req = parse(engine, body, chat)
                if req.stream:
                    return StreamingResponse(events(engine, req),
                                             media_type="text/event-stream")
                return JSONResponse(await complete(engine, req))
            except RequestError as e:
                return error(e)
            except Exception as e:
                return error(RequestError(500, f"generation failed: {e}"))
        return handle

    async def health(_: HTTPRequest) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def models(_: HTTPRequest) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [
            {"id": engine.name, "object": "model", "created": engine.created,
             "owned_by": "lumos"}]})

    async def http_error(_: HTTPRequest, e: Exception) -> JSONResponse:
        assert isinstance(e, HTTPException)
        return error(RequestError(e.status_code, str(e.detail)))

    return Starlette(routes=[
        Route("/health", health), Route("/v1/models", models),
        Route("/v1/completions", endpoint(False), methods=["POST"]),
        Route("/v1/chat/completions", endpoint(True), methods=["POST"])],
        exception_handlers={HTTPException: http_error})


def serve(engine: Engine, host: str, port: int,
          ready: Callable[[str], None] | None = None) -> None:
    """Listen on host:port (0: a free port) until interrupted; `ready` gets the base URL
    once the socket listens (connections made from then on wait for the server)."""
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # before `ready`: a client told the URL is queued, not refused
    url = f"http://{host}:{sock.getsockname()[1]}"
    config = uvicorn.Config(app(engine), log_level="warning", timeout_graceful_shutdown=5)
    if ready:
        ready(url)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        engine.close()
        sock.close()
