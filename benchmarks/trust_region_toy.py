"""Trust-region toy: does a too-high learning rate break vanilla PG but not PPO and TRPO?

The problem is a short combination lock, a stand-in for the coordinator's choice among candidates:
``contexts`` contexts x ``horizon`` steps = a few hundred states, each with 4-12 valid candidates.
At each step one candidate is right: it earns ``1 / horizon`` and moves on; any other ends the episode.
So the full return of 1 needs every step right. The policy is a softmax over a *shared* linear score
``phi(s, c) . theta`` (shared weights, like an LLM's: a big step for one state moves every state) and the
value head is a table; both are trained by ``teamtr.rl`` exactly as the trainer would call it.

The expected return of a policy is computed exactly (no sampling noise) after every update. Reported
per algorithm over seeds: the final return, the worst drop from the best return seen so far (a collapse
measure) and the exact mean KL(old || new) of each update over the states visited.

    python benchmarks/trust_region_toy.py            # the README table, 5 seeds, < 1 min on a CPU
    python benchmarks/trust_region_toy.py --seeds 1 --updates 30
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from teamtr.rl import AlgoConfig, Minibatch, Rollout, make_algorithm


@dataclass
class Lock:
    """The combination lock: features ``phi [S, C, D]``, ``mask [S, C]``, the right candidate ``[S]``.

    State ``s = context * horizon + step``.
    """

    phi: Tensor
    mask: Tensor
    right: Tensor
    horizon: int

    @classmethod
    def make(cls, seed: int, contexts: int = 100, horizon: int = 3, dim: int = 16,
             min_cands: int = 4, max_cands: int = 12) -> Lock:
        g = torch.Generator().manual_seed(seed)
        n = contexts * horizon
        counts = torch.randint(min_cands, max_cands + 1, (n,), generator=g)
        mask = torch.arange(max_cands)[None, :] < counts[:, None]
        phi = torch.randn(n, max_cands, dim, generator=g) / dim ** 0.5
        # A hidden linear scorer defines the right candidate, so theta can represent the optimum.
        theta_star = torch.randn(dim, generator=g)
        right = (phi @ theta_star).masked_fill(~mask, -torch.inf).argmax(dim=1)
        return cls(phi=phi, mask=mask, right=right, horizon=horizon)

    def probs(self, theta: Tensor) -> Tensor:
        return (self.phi @ theta).masked_fill(~self.mask, -torch.inf).softmax(dim=1)

    def expected_return(self, theta: Tensor) -> float:
        """Exact mean over contexts of ``sum_h prod_{j <= h} p(right at step j) / horizon``."""
        p_right = self.probs(theta).gather(1, self.right[:, None]).view(-1, self.horizon)
        return float(p_right.cumprod(dim=1).sum(dim=1).mean() / self.horizon)

    def collect(self, theta: Tensor, values: Tensor, episodes: int, g: torch.Generator,
                first_episode: int) -> Rollout:
        """Sample ``episodes`` episodes (all contexts stepped together, as the trainer batches teams)."""
        contexts = self.phi.shape[0] // self.horizon
        ctx = torch.randint(contexts, (episodes,), generator=g)
        alive = torch.ones(episodes, dtype=torch.bool)
        rollout = Rollout()
        with torch.no_grad():
            for step in range(self.horizon):
                idx = alive.nonzero().flatten()
                if idx.numel() == 0:
                    break
                states = ctx[idx] * self.horizon + step
                logp = torch.log_softmax((self.phi[states] @ theta).masked_fill(
                    ~self.mask[states], -torch.inf), dim=1).masked_fill(~self.mask[states], 0.0)
                actions = torch.multinomial(logp.exp() * self.mask[states], 1, generator=g).squeeze(1)
                ok = actions == self.right[states]
                rollout.append(logp=logp, ref_logp=logp, mask=self.mask[states], actions=actions,
                               values=values[states], rewards=ok.float() / self.horizon,
                               terminated=~ok | (step == self.horizon - 1),
                               truncated=torch.zeros_like(ok), episode_id=idx + first_episode,
                               handles=states)
                alive[idx[~ok]] = False
        return rollout


def run(algo_name: str, seed: int, updates: int, lr: float, episodes: int) -> dict[str, list[float]]:
    """Train one algorithm on one seed; per-update exact return and exact KL(old || new)."""
    lock = Lock.make(seed)
    torch.manual_seed(seed)
    theta = torch.zeros(lock.phi.shape[2], requires_grad=True)
    values = torch.zeros(lock.phi.shape[0], requires_grad=True)
    # A constant LR (min_lr_ratio 1): the point is a step size that is too big, not its decay.
    config = AlgoConfig(lr=lr, value_lr=0.1, warmup_updates=0, min_lr_ratio=1.0,
                        minibatch_size=128, kl_coef=0.0, ent_coef_start=0.0, ent_coef_end=0.0,
                        trpo_delta=0.01, seed=seed)
    algo = make_algorithm(algo_name, [{"params": [theta]}], [values], config)

    def evaluate(mb: Minibatch) -> tuple[Tensor, Tensor]:
        width = mb.mask.shape[1]
        return lock.phi[mb.handles, :width] @ theta, values[mb.handles]

    g = torch.Generator().manual_seed(seed + 1000)
    returns, kls = [lock.expected_return(theta.detach())], []
    for u in range(updates):
        rollout = lock.collect(theta.detach(), values.detach(), episodes, g, u * episodes)
        algo.update(evaluate, rollout)
        with torch.no_grad():
            full = rollout.full_batch()
            new = torch.log_softmax(evaluate(full)[0].masked_fill(~full.mask, -torch.inf), dim=1)
            old = full.logp.masked_fill(~full.mask, -torch.inf)
            kl = (old.exp() * (old - new)).nan_to_num(0.0).sum(dim=1).mean()
        kls.append(float(kl))
        returns.append(lock.expected_return(theta.detach()))
    return {"return": returns, "kl": kls}


def summarise(curves: list[dict[str, list[float]]]) -> dict[str, float]:
    finals, drops, kl_means, kl_maxes = [], [], [], []
    for c in curves:
        r = c["return"]
        best, drop = r[0], 0.0
        for x in r:
            best = max(best, x)
            drop = max(drop, best - x)
        finals.append(r[-1])
        drops.append(drop)
        kl_means.append(sum(c["kl"]) / len(c["kl"]))
        kl_maxes.append(max(c["kl"]))
    n = len(curves)
    return {"final_return": sum(finals) / n, "final_return_min": min(finals),
            "worst_drop": sum(drops) / n, "worst_drop_max": max(drops),
            "kl_per_update": sum(kl_means) / n, "kl_max": max(kl_maxes)}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--lr", type=float, default=1.0, help="too high on purpose")
    parser.add_argument("--episodes", type=int, default=256, help="episodes per update")
    parser.add_argument("--out", default="results/trust_region_toy.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.time()
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, list[dict[str, list[float]]]] = {}
    for name in ("pg", "ppo", "trpo"):
        curves[name] = [run(name, s, args.updates, args.lr, args.episodes) for s in range(args.seeds)]
        table[name] = summarise(curves[name])
    seconds = time.time() - start
    print(f"lr={args.lr} seeds={args.seeds} updates={args.updates} episodes/update={args.episodes}"
          f" ({seconds:.0f} s)")
    print("| algorithm | final return (mean / min) | worst drop from best (mean / max) "
          "| KL(old||new) per update (mean / max) |")
    print("|---|---|---|---|")
    for name, row in table.items():
        print(f"| {name} | {row['final_return']:.3f} / {row['final_return_min']:.3f} "
              f"| {row['worst_drop']:.3f} / {row['worst_drop_max']:.3f} "
              f"| {row['kl_per_update']:.4f} / {row['kl_max']:.4f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "seconds": seconds, "table": table,
                               "curves": curves}, indent=1))
    return table


if __name__ == "__main__":
    main()
