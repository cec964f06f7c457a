"""Standard artefacts: the saved adapter names a real base model and loads with AutoPeftModelForCausalLM;
its model card names the world, the config and the results; layer counts are known before any load."""

import json
from pathlib import Path

import pytest
import torch

from teamtr.core import TeamTRError
from teamtr.policy.backbone import backbone_layers, base_model_path, cache_dir, load_backbone
from teamtr.policy.coordinator import Coordinator


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    """The tiny random model saved as an ordinary local model directory (3 layers)."""
    path = tmp_path_factory.mktemp("base") / "tiny-llama"
    backbone = load_backbone("tiny-random-3", device="cpu", dtype="float32")
    backbone.model.save_pretrained(path, safe_serialization=True)
    backbone.tokenizer.save_pretrained(path)
    return path


def test_backbone_layers_without_loading_weights(base_dir: Path) -> None:
    assert backbone_layers("tiny-random") == 2 and backbone_layers("tiny-random-5") == 5
    assert backbone_layers("smollm2-135m-instruct") == 30
    assert backbone_layers(str(base_dir)) == 3
    with pytest.raises(TeamTRError, match="no such directory"):
        backbone_layers("./no/such/model")


def test_base_model_path_of_each_kind(base_dir: Path) -> None:
    assert base_model_path("smollm2-135m-instruct") == str(cache_dir() / "smollm2-135m-instruct")
    assert base_model_path(str(base_dir)) == str(base_dir.resolve())
    assert base_model_path("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_saved_adapter_loads_with_auto_peft_and_matches_the_merged_model(base_dir: Path, tmp_path: Path) -> None:
    from peft import AutoPeftModelForCausalLM

    coordinator = Coordinator(load_backbone(str(base_dir), device="cpu", dtype="float32"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # lora_B starts at zero: give the adapter weights that change the logits
        for name, p in coordinator.peft.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    coordinator.save(tmp_path / "ckpt")
    adapter = tmp_path / "ckpt" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base_dir.resolve())
    card = (adapter / "README.md").read_text()
    assert f"base_model: {base_dir.resolve()}" in card and "LoRA rank" in card
    loaded = AutoPeftModelForCausalLM.from_pretrained(str(adapter), dtype=torch.float32)
    loaded.eval()
    ids = torch.tensor([coordinator.tokenizer("The team should open the door first.")["input_ids"]])
    with torch.no_grad():
        with coordinator.merged():
            want = coordinator.peft(input_ids=ids).logits
        got = loaded(input_ids=ids).logits
        base = loaded.get_base_model()
        with loaded.disable_adapter():
            plain = base(input_ids=ids).logits
    assert (want - plain).abs().max() > 1e-3  # the adapter matters, so the match below means something
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_run_model_card_names_world_config_and_results(tmp_path: Path) -> None:
    from teamtr.config import load_config
    from teamtr.train.card import write_model_card
    from teamtr.train.trainer import Trainer

    sets = ["model.backbone=tiny-random", "bc.enabled=false", "rollout.episodes=2", "rollout.parallel=2",
            "train.iterations=1", "train.eval_every=0", "train.final_eval_episodes=0", "algo.minibatch_size=8",
            "algo.epochs=1", "log.tensorboard=false", "env.max_steps=5", f"run_dir={tmp_path / 'run'}"]
    with Trainer(load_config(None, sets)) as trainer:
        trainer.run()
    run = tmp_path / "run"
    card = (run / "checkpoints" / "iter_000001" / "coordinator" / "adapter" / "README.md").read_text()
    assert "World: `escape-room` with max_steps=5" in card and "- `train.iterations`: 1" in card
    assert "## Results" not in card  # no final evaluation yet
    rows = {"trained": {"success": 0.75, "return": 1.5}, "random": {"success": 0.25, "return": -0.5}}
    (run / "final_eval.json").write_text(json.dumps({"episodes": {"trained": 4, "random": 4}, "rows": rows}))
    path = write_model_card(run)
    card = path.read_text()
    assert "| trained | 4 | 0.750 | 1.500 |" in card and "| random | 4 | 0.250 | -0.500 |" in card
    assert "resumed at" not in card
    # resumed with a new LR: the card says so beside the config's (latest) value; a moved run_dir alone is no change
    (run / "resumes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"iteration": 1, "changed": {"run_dir": ["a", "b"]}},
        {"iteration": 16, "changed": {"algo.lr": [0.001, 0.0003], "run_dir": ["b", "c"]}})))
    card = write_model_card(run).read_text()
    assert "- resumed at iteration 16 with `algo.lr` 0.001 -> 0.0003, `run_dir` b -> c\n" in card
    assert "resumed at iteration 1 " not in card
    assert write_model_card(tmp_path / "empty") is None
