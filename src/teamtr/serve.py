"""`teamtr serve`: a trained coordinator behind an OpenAI-compatible chat endpoint.

An agent framework (MetaGPT, AutoGen, any OpenAI client) asks the coordinator to choose a directive:

    POST /v1/chat/completions
    {"model": "teamtr/RUN",
     "messages": [{"role": "system", "content": TASK},          # the world's rules (several: joined)
                  {"role": "user", "content": STATE}],          # the last user message is the state
     "candidates": ["agent_B: fetch the map", "..."],           # extension; or a numbered list, below
     "history": ["agent_A opened the door"],                    # extension, optional
     "logprobs": true, "top_logprobs": 3,                       # optional: the candidates' probabilities
     "temperature": 0, "seed": 7}                               # 0 or absent: greedy; > 0: sampled

Without ``candidates`` the last user message must end its state with a numbered list (from 0 or 1)::

    Candidates:
    1. agent_B: fetch the map
    2. no-op

The user message may also be the exact text the coordinator reads in training (``policy.prompts.user_text``:
state, a ``Recent: ...`` line, ``Next directive?``): those lines are read back, so the prompt is the same.
Earlier turns are not read: a coordination request is stateless.

The reply's ``choices[0].message.content`` is the chosen candidate's text, exactly. Asked for logprobs,
``choices[0].logprobs.content`` holds one entry, the whole directive as a single "token", with the top-k
candidates as its ``top_logprobs``; a ``teamtr`` object holds the full candidate distribution and the
value head's estimate. Free text is not generated: a request without candidates is a 400.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from teamtr.core import TeamTRError
from teamtr.policy.prompts import Decision

MAX_BODY = 4 << 20  # bytes: a coordination request is a few kB of text
QUESTION = "Next directive?"  # the last line of ``user_text``
RECENT = "Recent: "
_HEADER = re.compile(r"^\s*candidates\s*:\s*$", re.IGNORECASE)
_ITEM = re.compile(r"^\s*(\d+)[.)]\s+(\S.*?)\s*$")
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class RequestError(Exception):
    """A request the server refuses: an HTTP status and a message for the client."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Sampling:
    """How to choose: greedy (``temperature`` 0) or sampled from softmax(log pi / temperature)."""

    temperature: float = 0.0
    seed: int | None = None
    top_logprobs: int | None = None  # None: no probabilities in the reply


# ----------------------------------------------------------------------------- reading a request
def _text(content: Any, where: str) -> str:
    """A message's content: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise RequestError(f"{where}.content must be a string or a list of text parts; the coordinator reads text "
                       "only.", where)


def split_candidates(text: str) -> tuple[str, list[str] | None]:
    """(the text without its candidate list, the candidates) from a ``Candidates:`` line followed by a
    numbered list ``1. ...`` (or ``0. ...``); ``(text, None)`` when there is no such line."""
    lines = text.split("\n")
    heads = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    if not heads:
        return text, None
    end = heads[-1] + 1
    numbers, items = [], []
    while end < len(lines) and (m := _ITEM.match(lines[end])):
        numbers.append(int(m.group(1)))
        items.append(m.group(2))
        end += 1
    first = numbers[0] if numbers else 1
    if not items or first not in (0, 1) or numbers != list(range(first, first + len(items))):
        raise RequestError(f"the 'Candidates:' list in the last user message must be numbered 1, 2, 3, ... (or "
                           f"from 0), one per line; got numbers {numbers or 'none'}.", "messages")
    return "\n".join(lines[: heads[-1]] + lines[end:]), items


def split_user_text(text: str) -> tuple[str, tuple[str, ...]]:
    """(state, history) of a user message; a trailing ``Next directive?`` line and a ``Recent: ...``
    line just above it are read back, so ``user_text``'s own output gives back the same prompt."""
    lines = text.rstrip().split("\n")
    if lines and lines[-1].strip() == QUESTION:
        lines.pop()
    history: tuple[str, ...] = ()
    if len(lines) > 1 and lines[-1].startswith(RECENT):
        history = (lines.pop()[len(RECENT):],)
    return "\n".join(lines), history


def _strings(value: Any, key: str) -> tuple[str, ...]:
    """A list of non-empty strings (or of ``{"text": ...}`` objects, as TeamTR directives serialise)."""
    if not isinstance(value, list):
        raise RequestError(f"{key} must be a list of strings, got {type(value).__name__}.", key)
    out = []
    for i, item in enumerate(value):
        text = item.get("text") if isinstance(item, dict) else item
        if not isinstance(text, str) or not text.strip():
            raise RequestError(f"{key}[{i}] must be a non-empty string (or an object with a 'text' string).", key)
        out.append(text)
    return tuple(out)


def read_decision(body: dict[str, Any]) -> Decision:
    """The ``Decision`` a chat-completions request body asks about (``RequestError`` when malformed)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list: a system message with the task and a user "
                           "message with the state and the candidates.", "messages")
    system, user = [], None
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise RequestError(f"messages[{i}] must be an object with a role ({', '.join(_ROLES)}).", "messages")
        if m["role"] in ("system", "developer"):
            system.append(_text(m.get("content"), f"messages[{i}]"))
        elif m["role"] == "user":
            user = _text(m.get("content"), f"messages[{i}]")
    if user is None or not user.strip():
        raise RequestError("messages has no user message with text: the last user message carries the state.",
                           "messages")
    if "candidates" in body:
        candidates = _strings(body["candidates"], "candidates")
    else:
        user, found = split_candidates(user)
        if found is None:
            raise RequestError("no candidates: the coordinator chooses among candidate directives and does not "
                               "generate free text; send \"candidates\": [...] (openai client: extra_body="
                               "{\"candidates\": [...]}) or end the last user message with 'Candidates:' and a "
                               "numbered list.", "candidates")
        candidates = tuple(found)
    if not candidates:
        raise RequestError("candidates is empty: give at least one candidate directive.", "candidates")
    state, history = split_user_text(user)
    if "history" in body:
        history = _strings(body["history"], "history")
    return Decision("\n\n".join(system), state, history, candidates)


def read_sampling(body: dict[str, Any]) -> Sampling:
    """Greedy unless ``temperature`` > 0; probabilities in the reply when ``logprobs`` or ``top_logprobs``."""
    def number(key: str, kind: type, low: float, high: float = math.inf) -> Any:
        value = body.get(key)
        if value is None:
            return None
        if (isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int)
                or not low <= value < high):
            shown = f"from {low} to {high - 1}" if high < math.inf else f">= {low}, and finite"
            raise RequestError(f"{key} must be {'a number' if kind is float else 'an integer'} {shown}, "
                               f"got {value!r}.", key)
        return kind(value)

    if body.get("stream") not in (None, True, False):
        raise RequestError(f"stream must be true or false, got {body.get('stream')!r}.", "stream")
    if body.get("n") not in (None, 1):
        raise RequestError(f"n must be 1 (one directive per request), got {body.get('n')!r}.", "n")
    if body.get("logprobs") not in (None, True, False):
        raise RequestError(f"logprobs must be true or false, got {body.get('logprobs')!r}.", "logprobs")
    temperature = number("temperature", float, 0.0) or 0.0
    seed = number("seed", int, -(2**63), 2**63)
    top = number("top_logprobs", int, 0)
    if body.get("logprobs") and top is None:
        top = 0
    return Sampling(temperature, seed, top)


# ----------------------------------------------------------------------------- answering it
@dataclass(frozen=True)
class Choice:
    """What the coordinator chose for one decision."""

    index: int
    logp: list[float]  # log pi(c|s) per candidate
    value: float  # the value head's estimate of the return
    prompt_tokens: int
    completion_tokens: int  # the chosen directive with its end marker


@dataclass
class CoordinatorService:
    """A loaded coordinator answering requests one at a time (the model is not thread-safe)."""

    coordinator: Any  # teamtr.policy.coordinator.CoordinatorLike
    name: str
    seed: int = 0
    created: int = field(default_factory=lambda: int(time.time()))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _generator: Any = None

    def model_card(self) -> dict[str, Any]:
        return {"id": self.name, "object": "model", "created": self.created, "owned_by": "teamtr"}

    def choose(self, decision: Decision, sampling: Sampling) -> Choice:
        """The greedy choice, or one sampled from softmax(log pi / temperature) with the request's seed
        (else the server's own generator, seeded by ``--seed``)."""
        import torch

        with self._lock:
            out = self.coordinator.act([decision], greedy=True)
            prefix, encoded = self.coordinator.encode([decision])[0]  # token counts for ``usage``
            logp = out.logp[0, : len(decision.candidates)].double().cpu()
            index = out.choices[0]
            if sampling.temperature > 0:
                if sampling.seed is not None:
                    generator = torch.Generator().manual_seed(sampling.seed)
                else:
                    self._generator = self._generator or torch.Generator().manual_seed(self.seed)
                    generator = self._generator
                probs = torch.softmax(logp / sampling.temperature, dim=0)
                index = int(torch.multinomial(probs, 1, generator=generator))
        return Choice(index, logp.tolist(), float(out.values[0]), len(prefix) + len(encoded.dynamic),
                      len(encoded.candidates[index]))

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat-completions reply to a request body (``RequestError`` for a bad request)."""
        model = body.get("model")
        if model != self.name:
            raise RequestError(f"model {model!r} is not served here; this server serves {self.name!r} "
                               "(GET /v1/models).", "model", 404, "model_not_found")
        decision, sampling = read_decision(body), read_sampling(body)
        chosen = self.choose(decision, sampling)
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": decision.candidates[
            chosen.index]}, "finish_reason": "stop", "logprobs": None}
        extension: dict[str, Any] = {"index": chosen.index}
        if sampling.top_logprobs is not None:
            choice["logprobs"] = _openai_logprobs(decision.candidates, chosen.logp, chosen.index,
                                                  sampling.top_logprobs)
            extension["candidates"] = [{"index": i, "text": t, "logprob": lp, "prob": math.exp(lp)}
                                       for i, (t, lp) in enumerate(zip(decision.candidates, chosen.logp))]
            extension["value"] = chosen.value
        usage = {"prompt_tokens": chosen.prompt_tokens, "completion_tokens": chosen.completion_tokens,
                 "total_tokens": chosen.prompt_tokens + chosen.completion_tokens}
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.name, "choices": [choice], "usage": usage, "system_fingerprint": None,
                "teamtr": extension}


def stream_chunks(reply: dict[str, Any], usage: bool = False) -> list[dict[str, Any]]:
    """A completed reply as the chunks of a streamed one (``stream: true``): the whole directive in the
    first delta, then the finish reason, then (``stream_options.include_usage``) the token counts."""
    choice = reply["choices"][0]
    head = {k: reply[k] for k in ("id", "created", "model", "system_fingerprint")} | {"object": "chat.completion.chunk"}
    chunks = [head | {"choices": [{"index": 0, "delta": choice["message"], "logprobs": choice["logprobs"],
                                   "finish_reason": None}], "teamtr": reply["teamtr"]},
              head | {"choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}]
    if usage:
        chunks.append(head | {"choices": [], "usage": reply["usage"]})
    return chunks


def _openai_logprobs(candidates: Sequence[str], logp: Sequence[float], index: int, k: int) -> dict[str, Any]:
    """OpenAI's per-token logprobs structure with the whole directive as the one "token" and the top-k
    candidates as the alternatives at that position."""
    def entry(i: int) -> dict[str, Any]:
        return {"token": candidates[i], "logprob": logp[i], "bytes": list(candidates[i].encode("utf-8"))}

    top = sorted(range(len(candidates)), key=lambda i: -logp[i])[:k]
    return {"content": [{**entry(index), "top_logprobs": [entry(i) for i in top]}], "refusal": None}


# ----------------------------------------------------------------------------- HTTP
class Handler(BaseHTTPRequestHandler):
    """Routes: ``GET /health``, ``GET /v1/models[/ID]``, ``POST /v1/chat/completions``."""

    protocol_version = "HTTP/1.1"
    server: Server

    def do_GET(self) -> None:
        service = self.server.service
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            self._send(200, {"status": "ok", "model": service.name})
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [service.model_card()]})
        elif path == f"/v1/models/{service.name}":
            self._send(200, service.model_card())
        elif path == "/v1/chat/completions":
            self._fail(RequestError("use POST for /v1/chat/completions.", status=405))
        else:
            self._fail(RequestError(f"no route GET {path}; try POST /v1/chat/completions, GET /v1/models or GET "
                                    "/health.", status=404))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            body = self._body()
            if path != "/v1/chat/completions":
                raise RequestError(f"no route POST {path}; the coordinator answers POST /v1/chat/completions.",
                                   status=404)
            reply = self.server.service.complete(body)
            if body.get("stream"):
                options = body.get("stream_options")
                self._send_events(stream_chunks(reply, isinstance(options, dict) and bool(options.get("include_usage"))))
            else:
                self._send(200, reply)
        except RequestError as err:
            self._fail(err)
        except TeamTRError as err:
            self._fail(RequestError(str(err)))
        except Exception as err:  # noqa: BLE001 (a bug or a model failure: a 500, and the server stays up)
            self.log_error("scoring failed: %s: %s", type(err).__name__, err)
            self._fail(RequestError(f"the coordinator failed on this request ({type(err).__name__}); see the "
                                    "server log.", status=500))

    def _body(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise RequestError("a JSON body with a Content-Length header is required.", status=411)
        if int(length) > MAX_BODY:
            self.close_connection = True  # the unread body would be taken for the next request
            raise RequestError(f"request body of {length} bytes is over the {MAX_BODY}-byte limit.", status=413)
        raw = self.rfile.read(int(length))
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RequestError(f"the body is not valid JSON: {err}.") from None
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object.")
        return body

    def _fail(self, err: RequestError) -> None:
        self._send(err.status, err.body())

    def _send_events(self, chunks: list[dict[str, Any]]) -> None:
        """Server-sent events, all at once: the reply is complete before the first byte goes out."""
        events = [f"data: {json.dumps(c, allow_nan=False)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
        self._send(200, "".join(events).encode("utf-8"), "text/event-stream")

    def _send(self, status: int, payload: dict[str, Any] | bytes, kind: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload, allow_nan=False).encode("utf-8")
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, service: CoordinatorService, host: str = "127.0.0.1", port: int = 8000) -> None:
        self.service = service
        super().__init__((host, port), Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"


# ----------------------------------------------------------------------------- commands
def load_coordinator(checkpoint: str, config_path: str | None, sets: Sequence[str]) -> tuple[Any, Any, Path]:
    """(coordinator with the checkpoint's adapter, its config, run directory), as ``teamtr eval
    --checkpoint`` loads them: the run's config.yaml unless ``config_path``, then ``sets``."""
    from teamtr.cli import _config, resolve_checkpoint
    from teamtr.policy.coordinator import build_coordinator

    folder, run_dir = resolve_checkpoint(checkpoint)
    config = _config(config_path, sets, run_dir)
    coordinator = build_coordinator(config)
    coordinator.load(folder)
    return coordinator, config, run_dir


def cmd_serve(args: argparse.Namespace) -> int:
    coordinator, _, run_dir = load_coordinator(args.checkpoint, args.config, args.set)
    service = CoordinatorService(coordinator, args.name or f"teamtr/{run_dir.resolve().name}", seed=args.seed)
    try:
        server = Server(service, args.host, args.port)
    except OSError as err:
        raise TeamTRError(f"cannot listen on {args.host}:{args.port} ({err.strerror}); pick another --port "
                          "(0: any free one).") from None
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: --host {args.host} exposes the coordinator beyond this machine, without authentication.")
    print(f"serving {service.name} on {server.url} (POST /chat/completions, GET /models, GET /health)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def add_commands(sub: Any) -> None:
    """Register ``serve`` and ``export`` on the ``teamtr`` sub-command parser."""
    from teamtr.cli import _add_set, _sub
    from teamtr.export import add_export

    sv = _sub(sub, "serve", "answer coordination requests from any OpenAI client (chat completions)",
              "  teamtr serve runs/default\n  teamtr serve runs/default/checkpoints/iter_000010 --port 0\n",
              cmd_serve)
    sv.add_argument("checkpoint", metavar="RUN_OR_CHECKPOINT", help="a run directory or checkpoint folder")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=int, default=8000, help="port (0: any free one; the bound one is printed)")
    sv.add_argument("--name", help="the model id clients send (default teamtr/RUN_DIR_NAME)")
    sv.add_argument("--seed", type=int, default=0, help="seed for sampled replies that give no seed")
    sv.add_argument("--config", help="config to build the coordinator with (default: the run's config.yaml)")
    _add_set(sv)
    add_export(sub)
