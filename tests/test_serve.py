"""`teamtr serve` answers the openai client with the coordinator's own choice and probabilities;
`teamtr export --merged` writes a transformers model that scores candidates as the adapter does."""

import json
import os
import select
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import torch

from teamtr.cli import main
from teamtr.config import load_config
from teamtr.envs import make
from teamtr.policy.prompts import user_text
from teamtr.serve import load_coordinator, split_candidates, split_user_text
from teamtr.team import Team
from teamtr.train.trainer import Trainer

openai = pytest.importorskip("openai")

TRAIN = ["model.backbone=tiny-random", "model.rl_layers=all", "bc.demos=8", "bc.epochs=1", "bc.lr=0.01",
         "rollout.episodes=2", "rollout.parallel=2", "train.iterations=1", "env.max_steps=3", "algo.epochs=1",
         "train.final_eval_episodes=0", "log.tensorboard=false"]
NAME = "teamtr/coordinator-under-test"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One small trained run (BC then one PPO iteration), as `teamtr train` writes it, minus the report."""
    run = tmp_path_factory.mktemp("serve") / "run"
    trainer = Trainer(load_config(None, [*TRAIN, f"run_dir={run}"]))
    try:
        trainer.run()
    finally:
        trainer.close()
    return run


@pytest.fixture(scope="module")
def coordinator(run_dir):
    loaded, config, _ = load_coordinator(str(run_dir), None, [])
    return loaded, config


@pytest.fixture(scope="module")
def states(coordinator):
    """Decisions from two episodes, a few ticks in, so that they carry history."""
    _, config = coordinator
    found = []
    for seed in (0, 1):
        team = Team(make(config.env.name, **config.env.options()), history_len=2)
        state = team.reset(seed)
        found.append(state)
        for _ in range(2):
            state = team.step(state.expert)[0]
            found.append(state)
    assert any(s.history for s in found)
    return found


@pytest.fixture(scope="module")
def server(run_dir):
    """``teamtr serve RUN --port 0`` in a subprocess; yields its base URL."""
    cmd = [sys.executable, "-c", "import sys; from teamtr.cli import main; sys.exit(main(sys.argv[1:]))",
           "serve", str(run_dir), "--port", "0", "--name", NAME]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 300)  # a safety net, not a timing assertion
        line = proc.stdout.readline() if ready else ""
        assert line.startswith(f"serving {NAME} on http://127.0.0.1:"), line
        yield line.split(" on ")[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0)


def _messages(state, user=None):
    return [{"role": "system", "content": state.task}, {"role": "user", "content": user or state.state}]


def _texts(state):
    return [c.text for c in state.candidates]


def test_the_reply_is_the_greedy_directive_with_the_coordinators_probabilities(client, coordinator, states):
    model, _ = coordinator
    want = model.act(states, greedy=True)
    for b, state in enumerate(states):
        reply = client.chat.completions.create(model=NAME, messages=_messages(state), logprobs=True,
                                               top_logprobs=3, extra_body={"candidates": _texts(state),
                                                                           "history": list(state.history)})
        texts = _texts(state)
        assert reply.choices[0].message.content == texts[want.choices[b]]
        ext = reply.model_extra["teamtr"]
        assert ext["index"] == want.choices[b] and [c["text"] for c in ext["candidates"]] == texts
        got = torch.tensor([c["logprob"] for c in ext["candidates"]], dtype=torch.float64)
        assert torch.allclose(got, want.logp[b, : len(texts)].double(), atol=1e-5, rtol=0)
        assert sum(c["prob"] for c in ext["candidates"]) == pytest.approx(1.0, abs=1e-6)
        assert ext["value"] == pytest.approx(float(want.values[b]), abs=1e-5)
        token = reply.choices[0].logprobs.content[0]
        assert token.token == reply.choices[0].message.content
        assert token.logprob == pytest.approx(float(got[want.choices[b]]), abs=1e-12)
        top = [t.token for t in token.top_logprobs]
        assert top == [texts[i] for i in got.argsort(descending=True, stable=True)[:3].tolist()]
        prefix, encoded = model.encode([state])[0]
        assert reply.usage.prompt_tokens == len(prefix) + len(encoded.dynamic)
        assert reply.usage.completion_tokens == len(encoded.candidates[want.choices[b]])
        assert reply.model == NAME and reply.choices[0].finish_reason == "stop"


def test_a_streamed_reply_carries_the_same_directive_and_usage(client, states):
    state = states[1]
    kwargs = {"model": NAME, "messages": _messages(state), "extra_body": {"candidates": _texts(state)}}
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, "stop"]
    assert chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_a_numbered_list_in_the_training_user_text_gives_the_same_prompt(client, states):
    for state in states[:3]:
        listed = "\n".join(f"{i + 1}. {t}" for i, t in enumerate(_texts(state)))
        asked = client.chat.completions.create(
            model=NAME, messages=_messages(state, f"{user_text(state)}\nCandidates:\n{listed}"), logprobs=True)
        structured = client.chat.completions.create(
            model=NAME, messages=_messages(state), logprobs=True,
            extra_body={"candidates": _texts(state), "history": list(state.history)})
        assert asked.choices[0].message.content == structured.choices[0].message.content
        a = [c["logprob"] for c in asked.model_extra["teamtr"]["candidates"]]
        b = [c["logprob"] for c in structured.model_extra["teamtr"]["candidates"]]
        assert a == pytest.approx(b, abs=1e-6)
        assert asked.choices[0].logprobs.content[0].top_logprobs == []  # logprobs without top_logprobs: k = 0
    plain = client.chat.completions.create(model=NAME, messages=_messages(states[0]),
                                           extra_body={"candidates": _texts(states[0])})
    assert plain.choices[0].logprobs is None and set(plain.model_extra["teamtr"]) == {"index"}


def test_sampling_follows_the_temperature_and_the_seed(client, states):
    state = states[0]
    kwargs = {"model": NAME, "messages": _messages(state), "logprobs": True,
                  "extra_body": {"candidates": _texts(state), "history": list(state.history)}}
    picks = []
    for seed in range(12):
        reply = client.chat.completions.create(temperature=3.0, seed=seed, **kwargs)
        logp = torch.tensor([c["logprob"] for c in reply.model_extra["teamtr"]["candidates"]], dtype=torch.float64)
        want = int(torch.multinomial(torch.softmax(logp / 3.0, 0), 1, generator=torch.Generator().manual_seed(seed)))
        assert reply.model_extra["teamtr"]["index"] == want
        assert reply.choices[0].message.content == _texts(state)[want]
        picks.append(want)
    assert len(set(picks)) > 1  # at temperature 3 a tiny model's policy is near uniform
    again = client.chat.completions.create(temperature=3.0, seed=5, **kwargs)
    assert again.model_extra["teamtr"]["index"] == picks[5]


@pytest.mark.parametrize("change, status, message", [
    ({"candidates": None}, 400, "no candidates: the coordinator chooses among candidate directives"),
    ({"messages": []}, 400, "messages must be a non-empty list"),
    ({"messages": [{"role": "system", "content": "rules"}]}, 400, "messages has no user message"),
    ({"candidates": []}, 400, "candidates is empty"),
    ({"candidates": "agent_A: go"}, 400, "candidates must be a list of strings"),
    ({"candidates": ["a", ""]}, 400, "candidates[1] must be a non-empty string"),
    ({"model": "gpt-4o"}, 404, "model 'gpt-4o' is not served here; this server serves 'teamtr/coordinator"),
    ({"stream": "yes"}, 400, "stream must be true or false"),
    ({"n": 2}, 400, "n must be 1"),
    ({"temperature": -1}, 400, "temperature must be a number >= 0.0, and finite"),
    ({"seed": 2**64}, 400, "seed must be an integer from"),
    ({"top_logprobs": "3"}, 400, "top_logprobs must be an integer >= 0"),
    ({"candidates": None, "messages": [{"role": "user", "content": "s\nCandidates:\n1. a\n3. b"}]}, 400,
     "numbered 1, 2, 3"),
])
def test_bad_requests_get_a_status_and_a_message(server, change, status, message):
    body = {"model": NAME, "messages": [{"role": "user", "content": "state"}], "candidates": ["a", "b"]}
    body.update(change)
    body = {k: v for k, v in body.items() if v is not None}
    got_status, reply = _post(server + "/chat/completions", json.dumps(body).encode())
    assert got_status == status and message in reply["error"]["message"], reply
    assert reply["error"]["type"] == "invalid_request_error"


def test_the_openai_client_raises_the_servers_message(client):
    with pytest.raises(openai.BadRequestError, match="no candidates"):
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "free text, please"}])
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                       extra_body={"candidates": ["a"]})


def test_raw_http_errors_health_and_models(server):
    assert _post(server + "/chat/completions", b"{not json")[0] == 400
    assert _post(server + "/chat/completions", b"[1, 2]")[1]["error"]["message"] == "the body must be a JSON object."
    assert _post(server + "/embeddings", b"{}")[0] == 404
    root = server.removesuffix("/v1")
    with urllib.request.urlopen(root + "/health") as r:
        assert json.loads(r.read()) == {"status": "ok", "model": NAME}
    with urllib.request.urlopen(server + "/models") as r:
        assert [m["id"] for m in json.loads(r.read())["data"]] == [NAME]


def test_the_server_listens_on_127_0_0_1_only(server):
    port = int(server.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass
    if sys.platform.startswith("linux"):  # all of 127/8 is loopback here: a 0.0.0.0 bind would answer
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=10).close()


def test_split_candidates_and_user_text_read_back_what_user_text_writes(states):
    for state in states:
        listed = "\n".join(f"{i}) {t}" for i, t in enumerate(_texts(state)))
        rest, found = split_candidates(f"{user_text(state)}\ncandidates:\n{listed}\n")
        assert found == _texts(state)
        s, history = split_user_text(rest)
        assert user_text(type("D", (), {"state": s, "history": history})) == user_text(state)
    assert split_candidates("no list here") == ("no list here", None)


def test_export_merged_loads_with_transformers_and_scores_as_the_adapter(run_dir, coordinator, states, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "merged"
    assert main(["export", str(run_dir), "--merged", str(out)]) == 0
    assert main(["export", str(run_dir), "--merged", str(out)]) == 2  # not over a folder with files
    card = " ".join((out / "README.md").read_text().split())
    assert "value head of the checkpoint is **not** part of this model" in card and "tiny-random" in card and "escape-room" in card
    settings = json.loads((out / "teamtr.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.dtype == torch.float32 and not any("lora" in k for k in model.state_dict())
    adapted, _ = coordinator
    want = adapted.act(states, greedy=True).logp
    with adapted.disable_adapter():
        base = adapted.act(states, greedy=True).logp
    assert (want - base).nan_to_num().abs().max() > 1e-3  # the adapter matters, so the merge is tested
    for b, state in enumerate(states):
        got = _score_as_the_card_says(model, tokenizer, settings, state)
        assert torch.allclose(got, want[b, : len(got)].double(), atol=1e-4, rtol=0)


def _score_as_the_card_says(model, tokenizer, settings, state):
    """README.md's recipe, one full forward pass per candidate: log pi over the candidates [C]."""
    prompt = tokenizer.apply_chat_template([{"role": "system", "content": state.task},
                                            {"role": "user", "content": user_text(state)}],
                                           tokenize=False, add_generation_prompt=True)
    f = settings["chat_format"]
    assert prompt == f["head"] + state.task + f["user_head"] + user_text(state) + f["assistant_head"]
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    end = tokenizer(settings["end_marker"], add_special_tokens=False)["input_ids"][:1]
    scores = []
    for text in _texts(state):
        cand = tokenizer(text, add_special_tokens=False)["input_ids"] + end
        with torch.no_grad():
            logits = model(torch.tensor([ids + cand])).logits[0, len(ids) - 1: -1].double()
        total = logits.log_softmax(-1).gather(1, torch.tensor(cand)[:, None]).sum()
        per = {"sum": 1, "token": len(cand), "word": max(1, len(text.split()))}[settings["normalization"]]
        scores.append(total / per / settings["temperature"])
    return torch.stack(scores).log_softmax(0)


def _post(url, data):
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


class _Broken:
    """A coordinator whose scoring fails, as a model bug or an out-of-memory would."""

    def act(self, decisions, greedy=False):
        raise RuntimeError("CUDA out of memory")


def test_a_failing_coordinator_gets_a_500_and_the_server_stays_up():
    import threading

    from teamtr.serve import CoordinatorService, Server

    server = Server(CoordinatorService(_Broken(), "broken"), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        body = {"model": "broken", "messages": [{"role": "user", "content": "s"}], "candidates": ["a"]}
        status, reply = _post(server.url + "/chat/completions", json.dumps(body).encode())
        assert status == 500 and "failed on this request (RuntimeError)" in reply["error"]["message"]
        assert reply["error"]["type"] == "server_error"
        with urllib.request.urlopen(server.url.removesuffix("/v1") + "/health") as r:
            assert r.status == 200
    finally:
        server.shutdown()
        server.server_close()


def test_serve_on_a_busy_port_is_an_error_naming_the_port(monkeypatch, tmp_path, capsys):
    import teamtr.serve

    monkeypatch.setattr(teamtr.serve, "load_coordinator", lambda *args: (_Broken(), None, tmp_path))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", str(tmp_path), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
