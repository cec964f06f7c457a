"""Coordinator: cached-trunk evaluate equals full recomputation; save/load round trip; errors."""

from dataclasses import dataclass

import pytest
import torch

from teamtr.core import TeamTRError
from teamtr.policy.backbone import load_backbone
from teamtr.policy.coordinator import Coordinator
from teamtr.rl.losses import masked_log_softmax


@dataclass
class Decision:
    task: str
    state: str
    history: tuple
    candidates: list


AGENTS = ["agent_A", "agent_B", "agent_C"]
CANDS = [f"{a}: fetch the {i}" for a in AGENTS for i in ("map", "key")] + ["agent_A: open the door", "no new directive"]


def decisions(n: int = 6) -> list[Decision]:
    return [
        Decision("Escape room: items to the door, then open it.",
                 f"map: in vault (only agent_B may enter). tick {t}", ("agent_A: fetch the key",),
                 CANDS[: 3 + t % 6])
        for t in range(n)
    ]


def perturb_lora(coord: Coordinator, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for grp in coord.policy_param_groups():
            for p in grp["params"]:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
        coord.value_head.weight.add_(torch.randn(coord.value_head.weight.shape, generator=g))
    coord.weights_changed()


def test_cached_trunk_equals_full_recomputation():
    coord = Coordinator(load_backbone("tiny-random-4", device="cpu"), train_layers=2)
    perturb_lora(coord)
    out = coord.act(decisions(), keep=True)
    assert all(s.rows_hidden is not None for s in coord._store)
    scores, values = coord.evaluate(out.handles)  # top 2 layers only, from the cache
    coord.first_trained, saved = 0, coord.first_trained  # force the full pass
    full_scores, full_values = coord.evaluate(out.handles)
    coord.first_trained = saved
    m = out.mask
    assert torch.allclose(scores[m], full_scores[m], atol=1e-4)
    assert torch.allclose(values, full_values, atol=1e-4)
    assert torch.allclose(masked_log_softmax(scores, m)[m], out.logp[m], atol=1e-4)
    # gradients reach only the top layers' adapters
    scores[m].sum().backward()
    layers = {g["layer"] for g in coord.policy_param_groups() if any(p.grad is not None for p in g["params"])}
    assert layers == {2, 3}


def test_act_log_probs_change_with_weights_and_save_load_round_trips(tmp_path):
    coord = Coordinator(load_backbone("tiny-random", device="cpu"), normalization="word")
    before = coord.act(decisions(), greedy=True).logp
    perturb_lora(coord, seed=1)
    after = coord.act(decisions(), greedy=True)
    assert (after.logp - before).abs()[after.mask].max() > 1e-3  # memo invalidated: new weights used
    coord.save(tmp_path / "ckpt")
    fresh = Coordinator(load_backbone("tiny-random", device="cpu"), normalization="word")
    fresh.load(tmp_path / "ckpt")
    again = fresh.act(decisions(), greedy=True)
    assert torch.equal(again.logp, after.logp) and torch.equal(again.values, after.values)
    assert not list((tmp_path / "ckpt").rglob("*.bin")) and not list((tmp_path / "ckpt").rglob("*.pt"))
    with coord.disable_adapter():
        ref = coord.act(decisions(), greedy=True).logp
    assert torch.allclose(ref[after.mask], before[after.mask], atol=1e-5)  # adapter off = base model


def test_sampling_follows_the_distribution():
    coord = Coordinator(load_backbone("tiny-random", device="cpu"), temperature=0.5)
    decs = decisions(1) * 400
    out = coord.act(decs, generator=torch.Generator().manual_seed(0))
    p = out.logp[0].exp()[: len(decs[0].candidates)]
    freq = torch.bincount(torch.tensor(out.choices), minlength=p.numel()).float() / len(decs)
    assert (freq - p).abs().max() < 0.08


def test_bad_settings():
    bb = load_backbone("tiny-random", device="cpu")
    with pytest.raises(TeamTRError, match="train_layers"):
        Coordinator(bb, train_layers=3)
    with pytest.raises(TeamTRError, match="normalization"):
        Coordinator(bb, normalization="mean")


def test_train_only_top_after_all_layer_cloning_uses_the_cache():
    coord = Coordinator(load_backbone("tiny-random-4", device="cpu"))  # LoRA on all 4 layers
    perturb_lora(coord, seed=2)  # as if behaviour cloning had trained every layer
    want = coord.act(decisions(), greedy=True)
    coord.train_only_top(1)
    assert {g["layer"] for g in coord.policy_param_groups()} == {3}
    out = coord.act(decisions(), keep=True, greedy=True)
    assert torch.allclose(out.logp[out.mask], want.logp[want.mask], atol=1e-5)  # same policy
    scores, _ = coord.evaluate(out.handles)
    assert torch.allclose(masked_log_softmax(scores, out.mask)[out.mask], out.logp[out.mask], atol=1e-4)
    with pytest.raises(TeamTRError, match="rl_layers"):
        coord.train_only_top(5)


def test_merged_adapter_gives_the_same_policy_and_restores_weights():
    coord = Coordinator(load_backbone("tiny-random", device="cpu"))
    perturb_lora(coord, seed=3)
    before = {k: v.detach().clone() for k, v in coord.backbone.model.state_dict().items()}
    want = coord.act(decisions(), greedy=True)
    with coord.merged():
        got = coord.act(decisions(), greedy=True)
    assert torch.allclose(got.logp[want.mask], want.logp[want.mask], atol=1e-4)
    after = coord.backbone.model.state_dict()
    assert max((after[k] - v).abs().max().item() for k, v in before.items()) < 1e-5


def test_bfloat16_trunk_scores_near_float32_and_never_merges():
    torch.manual_seed(0)  # the same LoRA initialisation in both
    full = Coordinator(load_backbone("tiny-random", device="cpu", dtype="float32"))
    torch.manual_seed(0)
    half = Coordinator(load_backbone("tiny-random", device="cpu", dtype="bfloat16"))
    perturb_lora(full, seed=5)
    perturb_lora(half, seed=5)
    want = full.act(decisions(), greedy=True)
    got = half.act(decisions(), greedy=True, keep=True)
    assert got.logp.dtype == torch.float32
    gap = (got.logp - want.logp)[want.mask].abs().max().item()
    assert 0 < gap < 0.02  # bf16 trunk rounding, not bf16 logits (those are off by ~0.1 nat alone)
    scores, _ = half.evaluate(got.handles)  # the update recomputes exactly what acting chose from
    assert torch.equal(masked_log_softmax(scores, got.mask)[got.mask], got.logp[got.mask])
    head = half.scorer._head32[1]
    half.act(decisions(), greedy=True)
    assert half.scorer._head32[1] is head and head.dtype == torch.float32  # upcast once, reused
    before = {k: v.detach().clone() for k, v in half.backbone.model.state_dict().items()}
    with half.merged():
        merged = half.act(decisions(), greedy=True)
    assert torch.equal(merged.logp[got.mask], got.logp[got.mask])
    after = half.backbone.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_settings_import_without_torch_and_validate_fields():
    import subprocess
    import sys

    code = "import sys, teamtr.policy.settings, teamtr.policy; assert 'torch' not in sys.modules, 'torch loaded'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    from teamtr.policy.settings import NORMALIZATIONS, LoraSettings

    assert NORMALIZATIONS == ("sum", "token", "word")
    assert LoraSettings(4, 8, 0.1, ["q_proj"]).target_modules == ("q_proj",)
    for bad, match in (({"rank": 0}, r"lora.rank = 0: must be an integer >= 1"),
                       ({"alpha": float("nan")}, r"lora.alpha = nan"),
                       ({"dropout": 1.0}, r"lora.dropout = 1.0: must be a number in \[0, 1\)"),
                       ({"target_modules": ()}, r"lora.target_modules = \(\)")):
        with pytest.raises(ValueError, match=match):
            LoraSettings(**bad)


def test_checkpoint_records_backbone_lora_and_adapter_keys(tmp_path):
    import json

    coord = Coordinator(load_backbone("tiny-random", device="cpu"))
    coord.save(tmp_path / "c")
    saved = json.loads((tmp_path / "c" / "coordinator.json").read_text())
    assert saved["model"] == {"name": "tiny-random", "layers": 2, "hidden": coord.backbone.model.config.hidden_size,
                              "vocab": coord.backbone.model.config.vocab_size}
    assert saved["lora"]["rank"] == 8 and saved["train_layers"] == "all"
    assert saved["adapter_keys"] == coord.adapter_keys() and len(saved["adapter_keys"]) == 2 * 2 * 7
    top = Coordinator(load_backbone("tiny-random", device="cpu"), train_layers=1)
    with pytest.raises(TeamTRError, match=r"train_layers=all.*train_layers=1.*--set model.train_layers=all"):
        top.load(tmp_path / "c")
    (tmp_path / "c" / "value_head.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(TeamTRError, match=r"value_head.safetensors: not a readable safetensors file"):
        coord.load(tmp_path / "c")
    (tmp_path / "c" / "coordinator.json").write_text('{"model": {"na')
    with pytest.raises(TeamTRError, match=r"coordinator.json: not valid JSON"):
        coord.load(tmp_path / "c")
