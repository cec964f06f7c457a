"""Remote role agents: a model behind any OpenAI-compatible chat endpoint chooses each action.

vLLM, llama.cpp's server, Ollama, a hosted API or ``teamtr serve``: the agent's view and directive go
in the user message, which ends with its valid actions as a numbered ``Candidates:`` list; the reply
(a number, or an action's text) is parsed and checked. Nothing here can crash an episode:

- an unusable reply is a ``reply_invalid`` event; a failed request (connection refused, timeout, a
  5xx or 429) is retried up to ``retries`` times after ``backoff_s * 2**attempt`` seconds
  (``remote_retry`` events); when every try failed, ``remote_fallback``. In both cases the agent takes
  the fallback action: the world planner's action for its directive (what a scripted agent does).
- requests of every remote agent of every team go out together each tick, at most ``concurrency``
  at a time (one thread pool per ``RemoteResolver``).
- the API key is read from the environment variable named ``api_key_env``, at each request, and goes
  only into the Authorization header: never into a config, an event, a log or a transcript.

Plain ``urllib``: one POST per request needs no client library, and so no optional dependency.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from teamtr.agents.chooser import ActionRequest, Answer, ChoosingAgent
from teamtr.core import Event, TeamTRError

INSTRUCTION = "Answer with the number of one action."
_NUMBER = re.compile(r"^\s*(\d+)\b")


def user_message(request: ActionRequest) -> str:
    """The user message: the agent's prompt, the instruction, then the numbered candidates (from 1)."""
    lines = [request.prompt, INSTRUCTION, "Candidates:"]
    lines += [f"{i}. {action}" for i, action in enumerate(request.actions, 1)]
    return "\n".join(lines)


def parse_reply(reply: str, actions: Sequence[str]) -> int | None:
    """The index of the action a reply names: its exact text, a leading number (1-based, "2" or
    "2. move north"), or the one action whose text it contains; None when it names none."""
    text = reply.strip().strip(".!\"'`").strip()
    lowered = [a.lower() for a in actions]
    if text.lower() in lowered:
        return lowered.index(text.lower())
    number = _NUMBER.match(text)
    if number:
        n = int(number.group(1))
        return n - 1 if 1 <= n <= len(actions) else None
    named = [i for i, a in enumerate(lowered) if re.search(rf"(?<![\w]){re.escape(a)}(?![\w])", text.lower())]
    return named[0] if len(named) == 1 else None


class RemoteResolver:
    """Asks an OpenAI-compatible chat endpoint for the actions of many agents at once.

    Args mirror ``team.remote`` in the config (``teamtr.config.RemoteConfig`` holds the defaults);
    ``sleep`` waits between tries (tests pass a recorder).
    """

    def __init__(self, base_url: str, model: str, temperature: float, timeout_s: float, retries: int,
                 backoff_s: float, concurrency: int, api_key_env: str,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if api_key_env and api_key_env not in os.environ:
            raise TeamTRError(f"team.remote.api_key_env names {api_key_env!r}, which is not set in the "
                              f"environment; export {api_key_env}=... (or set team.remote.api_key_env '').")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.temperature, self.timeout_s = model, temperature, timeout_s
        self.retries, self.backoff_s, self.api_key_env = retries, backoff_s, api_key_env
        self.sleep = sleep
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="teamtr-remote")
        self.calls = 0

    def resolve(self, requests: Sequence[ActionRequest]) -> list[Answer]:
        self.calls += 1
        return list(self.pool.map(self.ask, requests))

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def ask(self, request: ActionRequest) -> Answer:
        """One agent's answer, with its retries; never raises for the server's faults."""
        if len(request.actions) <= 1:
            return Answer(0 if request.actions else None)
        events: list[Event] = []
        reason = ""
        for attempt in range(self.retries + 1):
            if attempt:
                events.append(Event("remote_retry", request.agent, f"try {attempt + 1}"))
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                reply = self._post(request)
            except _Retry as err:
                reason = str(err)
                continue
            except _Fatal as err:
                reason = str(err)
                break
            index = parse_reply(reply, request.actions)
            if index is None:
                events.append(Event("reply_invalid", request.agent, _short(reply)))
            return Answer(index, tuple(events))
        events.append(Event("remote_fallback", request.agent, reason))
        return Answer(None, tuple(events))

    def _post(self, request: ActionRequest) -> str:
        """The reply's text; ``_Retry`` for faults worth another try, ``_Fatal`` for the others."""
        body = {"model": self.model, "temperature": self.temperature, "max_tokens": 32,
                "messages": [{"role": "system", "content": request.system},
                             {"role": "user", "content": user_message(request)}]}
        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {os.environ.get(self.api_key_env, '')}"
        post = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(post, timeout=self.timeout_s) as response:
                data = json.loads(response.read())
        except urllib.error.HTTPError as err:
            kind = _Retry if err.code == 429 or err.code >= 500 else _Fatal
            raise kind(f"HTTP {err.code}") from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as err:
            raise _Retry(type(getattr(err, "reason", err)).__name__) from None
        except ValueError:
            raise _Retry("reply is not JSON") from None
        try:
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            raise _Fatal("reply has no choices[0].message.content") from None


class _Retry(Exception):
    """A fault that another try may not meet (refused, timed out, overloaded)."""


class _Fatal(Exception):
    """A fault that another try would meet again (a 4xx, a reply of the wrong shape)."""


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class RemoteAgent(ChoosingAgent):
    """A role agent played by a model behind an OpenAI-compatible endpoint (module docstring).

    Args:
        name: the agent's name in the world.
        resolver: the ``RemoteResolver`` shared by all remote agents of all teams.
        role_prompt: who the agent is (default: from its name).
    """

    def __init__(self, name: str, resolver: RemoteResolver, role_prompt: str | None = None) -> None:
        super().__init__(name, resolver, role_prompt)
