"""Whole-team decoding speed: outputs/s of grammar-constrained decoding at B = 1, 8, 16 states.

The states are real: ``--world`` (escape-room by default, ``--agents`` role agents) played by its
oracle through ``Team``. Each state's whole-team grammar is ``grammar_from_candidates`` of its
candidates (per agent its directives + "carry on"), its prompt the coordinator's chat prompt (static
task prefix + state text). Per batch size the table gives:

  decode    ``decoding.decode``, sampled (seeded): KV cache, trie mask, jump-forward over forced tokens
  score     ``decoding.score_outputs`` on the decoded outputs, no gradient: the teacher-forced pass of
            the token-level PPO update (one call)

with model calls per batch, output tokens per output and branching tokens (real choices) per output;
the medians of ``--repeats`` timings (and the best), and the max |decode - score| log-prob difference.

    python benchmarks/decoding.py --model tiny-random                  # seconds, CPU
    python benchmarks/decoding.py --model smollm2-135m-instruct --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import backbone, machine_line, median, table, timed, write_json  # noqa: E402

from teamtr.policy.decoding import GrammarDecision, decode, score_outputs  # noqa: E402
from teamtr.policy.grammar import grammar_from_candidates, tokenize_grammar  # noqa: E402
from teamtr.policy.prompts import ChatFormat, TokenCache, user_text  # noqa: E402


def whole_team_decisions(world: str, agents: int, n: int, tokens: TokenCache, chat: ChatFormat,
                         end: tuple[int, ...]) -> tuple[tuple[int, ...], list[GrammarDecision], float]:
    """(static prefix, ``n`` decisions, mean joint-space size) from oracle-played episodes."""
    from teamtr.envs import make
    from teamtr.team import Team

    team = Team(make(world, agents=agents) if agents else make(world))
    out: list[GrammarDecision] = []
    sizes: list[int] = []
    prefix: tuple[int, ...] = ()
    episode = 0
    while len(out) < n:
        state, done = team.reset(episode), False
        while not done and len(out) < n:
            grammar, _ = grammar_from_candidates(team.world.agents, [(c.target, c.text) for c in state.candidates])
            prefix = tokens([chat.head + state.task + chat.user_head])[0]
            dynamic = tokens([user_text(state) + chat.assistant_head])[0]
            out.append(GrammarDecision(dynamic, tokenize_grammar(grammar, tokens, end)))
            sizes.append(grammar.size)
            state, _, done, _ = team.step(state.expert)
        episode += 1
    return prefix, out, sum(sizes) / len(sizes)


def measure(model: Any, prefix: tuple[int, ...], decs: list[GrammarDecision], repeats: int,
            device: torch.device) -> dict[str, Any]:
    calls: list[int] = []
    hook = model.model.register_forward_hook(lambda *_: calls.append(1))
    gen = torch.Generator().manual_seed(0)
    try:
        decode(model, prefix, decs, generator=gen)  # warm-up
        calls.clear()
        t_dec, t_score = [], []
        for _ in range(repeats):
            s, out = timed(lambda: decode(model, prefix, decs, generator=gen), device)
            t_dec.append(s)
        n_calls = len(calls) / repeats
        with torch.no_grad():
            for _ in range(repeats):
                s, scored = timed(lambda: score_outputs(model, prefix, decs, out.tokens), device)
                t_score.append(s)
    finally:
        hook.remove()
    B = len(decs)
    return {
        "B": B,
        "decode_outputs_per_s": B / median(t_dec), "decode_best_outputs_per_s": B / min(t_dec),
        "score_outputs_per_s": B / median(t_score), "score_best_outputs_per_s": B / min(t_score),
        "decode_seconds": t_dec, "score_seconds": t_score,
        "model_calls_per_batch": n_calls,
        "tokens_per_output": float(out.scores.mask.sum()) / B,
        "branching_per_output": float(out.scores.branching.sum()) / B,
        "max_abs_diff_decode_vs_score": float((out.scores.logp - scored.logp).abs().max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random", help="backbone name, hub id or directory")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, auto")
    parser.add_argument("--world", default="escape-room")
    parser.add_argument("--agents", type=int, default=3, help="role agents (0: the world's default)")
    parser.add_argument("--batches", default="1,8,16", help="batch sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="results/decoding.json")
    args = parser.parse_args()
    sizes = [int(x) for x in args.batches.split(",")]
    if args.repeats < 1 or min(sizes) < 1:
        parser.error("--repeats and every --batches entry must be >= 1")

    bb = backbone(args.model, args.device)
    tokens = TokenCache(bb.tokenizer)
    chat = ChatFormat.from_tokenizer(bb.tokenizer)
    end = tokens([chat.end])[0][:1]
    prefix, decs, joint = whole_team_decisions(args.world, args.agents, max(sizes), tokens, chat, end)
    results = [measure(bb.model, prefix, decs[:B], args.repeats, bb.device) for B in sizes]
    print(f"{args.world}, {len(decs[0].grammar.lines)} agents, mean joint space {joint:.0f} outputs, prompt "
          f"{len(prefix)} + {sum(len(d.dynamic) for d in decs) / len(decs):.0f} tokens, {args.model}, "
          f"{bb.device}, {torch.get_num_threads()} threads")
    print(machine_line())
    print(table(["B", "decode out/s", "best", "score out/s", "best", "calls/batch", "tokens/out",
                 "branching/out", "max |diff|"],
                [[r["B"], r["decode_outputs_per_s"], r["decode_best_outputs_per_s"], r["score_outputs_per_s"],
                  r["score_best_outputs_per_s"], r["model_calls_per_batch"], r["tokens_per_output"],
                  r["branching_per_output"], f"{r['max_abs_diff_decode_vs_score']:.1e}"] for r in results]))
    out = write_json(args.out, {"settings": vars(args), "prefix_tokens": len(prefix),
                                "mean_joint_space": joint, "results": results})
    print(f"wrote {out.resolve()}")


if __name__ == "__main__":
    main()
