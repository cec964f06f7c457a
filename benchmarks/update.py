"""Update cost and sample efficiency of ``train_layers`` = 4, 12 and all on SmolLM2-135M.

1. Throughput: samples/s of one PPO epoch (clipped surrogate + value loss + entropy bonus, forward +
   backward + AdamW step, minibatches of ``--minibatch``) over ``--decisions`` real escape-room
   decisions (~75-token task prefix, ~95-token state, 4-12 candidates), for each depth:
   ``cache`` = ``Coordinator.evaluate`` re-running only the top N layers from the activations that
   ``act(keep=True)`` stored; ``full`` = the same update recomputing all layers (``first_trained = 0``:
   gradients still reach only the top N adapters). For ``all`` the two are the same thing.
2. Behaviour-cloning probe: a synthetic assignment task like the escape room ("key: in vault (only
   agent_B may enter). Needed now: the key." -> "agent_B: fetch the key"; items, rooms and which agent
   may enter each room are drawn at random, 3 agent candidates + the no-op). Fresh states arrive in
   batches of ``--bc-batch``; each batch gets ``--bc-steps`` AdamW steps of cross-entropy over the
   masked candidate scores from ``evaluate``; accuracy on ``--held-out`` unseen states is measured every
   ``--eval-every`` samples. Reported: samples until held-out accuracy >= ``--target``.

    python benchmarks/update.py                 # 256 decisions, up to 320 BC samples per depth
    python benchmarks/update.py --quick         # 64 decisions, up to 192 BC samples, 48 held-out
    python benchmarks/update.py --device cuda --model Qwen/Qwen2.5-0.5B-Instruct
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Decision, backbone, escape_decisions, machine_line, table, timed, write_json  # noqa: E402

from teamtr.policy.coordinator import Coordinator  # noqa: E402
from teamtr.rl.losses import chosen, clipped_surrogate, clipped_value_loss, entropy, masked_log_softmax  # noqa: E402

AGENTS = ("agent_A", "agent_B", "agent_C")
ITEMS = ("map", "key", "lamp", "rope", "coin", "torch")
ROOMS = ("vault", "tower", "library", "cellar", "attic", "garden")
PROBE_TASK = ("Escape room. Team: agent_A, agent_B, agent_C. Bring the needed items to the door in the hall. "
              "Each room admits one agent only. Send the right agent for the item needed now.")
NOOP = "no new directive"


def probe_state(rng: random.Random) -> tuple[Decision, int]:
    """One assignment decision and the index of its right candidate."""
    items, rooms, agents = rng.sample(ITEMS, 3), rng.sample(ROOMS, 3), rng.sample(AGENTS, 3)
    need = rng.randrange(3)
    text = " ".join(f"{i}: in {r} (only {a} may enter)." for i, r, a in zip(items, rooms, agents))
    cands = tuple(f"{a}: fetch the {items[need]}" for a in AGENTS) + (NOOP,)
    return Decision(PROBE_TASK, f"{text} Needed now: the {items[need]}.", (), cands), AGENTS.index(agents[need])


def probe_sets(n_train: int, n_held: int, seed: int) -> tuple[list[tuple[Decision, int]], list[tuple[Decision, int]]]:
    """Training stream and held-out states, disjoint by state text."""
    rng = random.Random(seed)
    held: dict[str, tuple[Decision, int]] = {}
    while len(held) < n_held:
        d, y = probe_state(rng)
        held[d.state] = (d, y)
    train: list[tuple[Decision, int]] = []
    while len(train) < n_train:
        d, y = probe_state(rng)
        if d.state not in held:
            train.append((d, y))
    return train, list(held.values())


def coordinator(args: argparse.Namespace, depth: int | str) -> Coordinator:
    torch.manual_seed(args.seed)  # the same LoRA init for every depth
    return Coordinator(backbone(args.model, args.device, args.random_weights), train_layers=depth)


def optimizer(coord: Coordinator, lr: float) -> torch.optim.Optimizer:
    groups = [{"params": g["params"], "lr": lr * g["lr_scale"]} for g in coord.policy_param_groups()]
    groups.append({"params": coord.value_parameters(), "lr": lr})
    return torch.optim.AdamW(groups, lr=lr, weight_decay=0.0)


def chunks(xs: Sequence[Any], n: int) -> list[Sequence[Any]]:
    return [xs[i: i + n] for i in range(0, len(xs), n)]


def ppo_step(coord: Coordinator, opt: torch.optim.Optimizer, batch: dict[str, Any], idx: Sequence[int]) -> None:
    """One PPO minibatch over stored decisions ``idx``: evaluate, clipped loss, backward, step."""
    hs = [batch["handles"][i] for i in idx]
    rows = torch.tensor(list(idx))
    scores, values = coord.evaluate(hs)
    mask = coord.stored_mask(hs).to(scores.device)
    logp = masked_log_softmax(scores, mask)
    ratio = (chosen(logp, batch["actions"][rows]) - batch["old_logp"][rows]).exp()
    loss = (clipped_surrogate(ratio, batch["adv"][rows], 0.2).mean()
            + 0.5 * clipped_value_loss(values, batch["old_values"][rows], batch["returns"][rows], None)
            - 0.01 * entropy(logp, mask).mean())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    coord.weights_changed()


def stored_batch(coord: Coordinator, decisions: list[Decision], minibatch: int, seed: int) -> tuple[dict[str, Any], float]:
    """The rollout pass over ``decisions`` (``act(keep=True)``, ``minibatch`` at a time, storing what
    evaluate needs), with random advantages and returns: (the batch ``ppo_step`` reads, acting seconds)."""
    g = torch.Generator().manual_seed(seed)
    handles, actions, old_logp, old_values = [], [], [], []
    act_s = 0.0
    for part in chunks(decisions, minibatch):
        s, out = timed(lambda: coord.act(part, generator=g, keep=True), coord.backbone.device)
        act_s += s
        handles += out.handles
        actions += out.choices
        old_logp.append(out.logp.gather(1, torch.tensor(out.choices, device=out.logp.device)[:, None])[:, 0])
        old_values.append(out.values)
    n = len(handles)
    dev = coord.backbone.device
    batch = {"handles": handles, "actions": torch.tensor(actions, device=dev),
             "old_logp": torch.cat(old_logp), "old_values": torch.cat(old_values),
             "adv": torch.randn(n, generator=g).to(dev), "returns": torch.randn(n, generator=g).to(dev)}
    return batch, act_s


def throughput(args: argparse.Namespace, depth: int | str, decisions: list[Decision]) -> dict[str, Any]:
    """samples/s of one PPO epoch from the cached trunk and with full recomputation."""
    coord = coordinator(args, depth)
    batch, act_s = stored_batch(coord, decisions, args.minibatch, args.seed)
    n, dev = len(batch["handles"]), coord.backbone.device
    opt = optimizer(coord, args.lr)
    row: dict[str, Any] = {"train_layers": depth, "decisions": n, "act_samples_per_s": n / act_s}
    saved = coord.first_trained
    modes = ["cache", "full"] if saved > 0 else ["full"]
    minibatches = chunks(range(n), args.minibatch)
    seconds = dict.fromkeys(modes, 0.0)
    if dev.type == "cuda":  # first calls pick kernels: one untimed minibatch per mode
        for mode in modes:
            coord.first_trained = saved if mode == "cache" else 0
            ppo_step(coord, opt, batch, minibatches[0])
    for idx in minibatches:
        # Modes alternate per minibatch so that load from other processes hits both alike.
        for mode in modes:
            coord.first_trained = saved if mode == "cache" else 0  # 0: full pass, same adapters
            s, _ = timed(lambda: ppo_step(coord, opt, batch, idx), dev)
            seconds[mode] += s
    for mode in modes:
        row[f"{mode}_samples_per_s"] = n / seconds[mode]
        row[f"{mode}_seconds"] = seconds[mode]
        print(f"  train_layers={depth} {mode}: {n / seconds[mode]:.2f} samples/s ({seconds[mode]:.1f} s)", flush=True)
    coord.first_trained = saved
    if "cache_samples_per_s" in row:
        row["cache_over_full"] = row["cache_samples_per_s"] / row["full_samples_per_s"]
    return row


@torch.no_grad()
def accuracy(coord: Coordinator, handles: list[int], labels: torch.Tensor, chunk: int) -> float:
    right = 0
    for part, ys in zip(chunks(handles, chunk), chunks(labels, chunk)):
        scores, _ = coord.evaluate(part)
        mask = coord.stored_mask(part).to(scores.device)
        right += int((masked_log_softmax(scores, mask).argmax(-1).cpu() == ys).sum())
    return right / len(handles)


def bc_probe(args: argparse.Namespace, depth: int | str) -> dict[str, Any]:
    """Samples of behaviour cloning until held-out accuracy reaches ``args.target``."""
    coord = coordinator(args, depth)
    train, held = probe_sets(args.bc_max, args.held_out, args.seed)
    held_labels = torch.tensor([y for _, y in held])
    held_handles: list[int] = []
    for part in chunks([d for d, _ in held], args.minibatch):  # stores the frozen trunk once
        held_handles += coord.act(part, greedy=True, keep=True).handles
    opt = optimizer(coord, args.lr)
    curve = [(0, accuracy(coord, held_handles, held_labels, args.minibatch))]
    print(f"  train_layers={depth} BC: 0 samples -> {curve[-1][1]:.2f}", flush=True)
    reached = None
    seen = 0
    t0 = time.perf_counter()
    for part in chunks(train, args.bc_batch):
        out = coord.act([d for d, _ in part], greedy=True, keep=True)
        ys = torch.tensor([y for _, y in part], device=coord.backbone.device)
        for _ in range(args.bc_steps):
            scores, _ = coord.evaluate(out.handles)
            mask = coord.stored_mask(out.handles).to(scores.device)
            loss = -chosen(masked_log_softmax(scores, mask), ys).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            coord.weights_changed()
        seen += len(part)
        if seen % args.eval_every == 0 or seen == len(train):
            curve.append((seen, accuracy(coord, held_handles, held_labels, args.minibatch)))
            print(f"  train_layers={depth} BC: {seen} samples -> {curve[-1][1]:.2f} (loss {loss.item():.3f})",
                  flush=True)
            if curve[-1][1] >= args.target:
                reached = seen
                break
    return {"train_layers": depth, "samples_to_target": reached, "best_accuracy": max(a for _, a in curve),
            "final_accuracy": curve[-1][1], "zero_shot_accuracy": curve[0][1], "curve": curve,
            "seconds": time.perf_counter() - t0}


def depth_arg(text: str) -> int | str:
    return "all" if text == "all" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--random-weights", action="store_true", help="random init of the same shapes")
    parser.add_argument("--depths", nargs="+", type=depth_arg, default=[4, 12, "all"])
    parser.add_argument("--decisions", type=int, default=256)
    parser.add_argument("--minibatch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--bc-max", type=int, default=320, help="most BC samples per depth")
    parser.add_argument("--bc-batch", type=int, default=16)
    parser.add_argument("--bc-steps", type=int, default=2, help="optimiser steps per BC batch")
    parser.add_argument("--held-out", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=32)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", choices=["throughput", "bc"], default=None, help="run only the other part")
    parser.add_argument("--quick", action="store_true",
                        help="64 decisions, up to 192 BC samples, 48 held-out (a 2-core CPU)")
    parser.add_argument("--out", default="results/update.json")
    args = parser.parse_args()
    if args.quick:
        args.decisions, args.bc_max, args.held_out = 64, 192, 48
    for key in ("decisions", "minibatch", "bc_max", "bc_batch", "bc_steps", "held_out", "eval_every"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be >= 1, got {getattr(args, key)}")
    if not 0 < args.target <= 1:
        parser.error(f"--target must be in (0, 1], got {args.target}")

    speed: list[dict[str, Any]] = []
    bc: list[dict[str, Any]] = []
    decisions = escape_decisions(args.decisions, 12)
    for depth in args.depths:
        if args.skip != "throughput":
            speed.append(throughput(args, depth, decisions))
            gc.collect()
        if args.skip != "bc":
            bc.append(bc_probe(args, depth))
            gc.collect()

    print(machine_line())
    print(f"\n{args.model}{' (random init)' if args.random_weights else ''}, {args.device}, "
          f"{torch.get_num_threads()} threads")
    if speed:
        print(f"PPO epoch over {speed[0]['decisions']} escape-room decisions, minibatch {args.minibatch}:")
        print(table(["train_layers", "cache samples/s", "full samples/s", "cache/full", "act samples/s"],
                    [[r["train_layers"], r.get("cache_samples_per_s", "-"), r["full_samples_per_s"],
                      r.get("cache_over_full", "-"), r["act_samples_per_s"]] for r in speed]))
    if bc:
        print(f"\nBC probe: samples to {args.target:.0%} on {args.held_out} held-out states "
              f"(batches of {args.bc_batch}, {args.bc_steps} steps each, lr {args.lr:g}, at most {args.bc_max}):")
        print(table(["train_layers", "samples to target", "zero-shot", "best acc", "final acc", "seconds"],
                    [[r["train_layers"], r["samples_to_target"] or f"> {r['curve'][-1][0]}",
                      r["zero_shot_accuracy"], r["best_accuracy"], r["final_accuracy"], r["seconds"]] for r in bc]))
    out = write_json(args.out, {"settings": vars(args), "throughput": speed, "bc_probe": bc})
    print(f"wrote {out.resolve()}")


if __name__ == "__main__":
    main()
