"""The multi-process learner (``torchrun``): every rank collects its share of the episodes, the
update's minibatches are split across ranks, and the trainable gradients are all-reduced.

Design, and why not ``DistributedDataParallel``: the update never calls a module's ``forward``; it
calls ``coordinator.evaluate(handles)``, which replays stored decisions (with a cached trunk, only the
top layers run). So the ranks exchange data by hand, in three steps per iteration:

1. **Rollout.** Rank r runs ``rollout.episodes / world_size`` episodes on its own block of training
   seeds (``RankSeeds``); ``gather_rollout`` all-gathers the small per-decision tensors, so every rank
   holds the same global ``Rollout`` (rank 0's decisions first). Activations stay where they were made:
   a decision can only be re-scored by the rank that collected it (its *owner*).
2. **Scoring a minibatch.** ``sharded_evaluate`` scores the minibatch rows each rank owns, all-gathers
   the scores and values (detached) and splices the rank's own rows, with gradients, into the full
   ``[B, C]`` tensors. Every rank then computes the same global loss, KL early stop and metrics.
3. **Gradients.** Backward on rank r reaches the parameters only through r's own rows, so the sum of
   the ranks' gradients is the 1-process gradient of the global loss: ``reduce_gradients`` sums them
   in one flat all-reduce queued at the end of every backward pass (before the clip and the step).
   Every rank then takes the same optimiser step, so parameters, optimiser and KL controller stay equal
   on all ranks and rank 0 alone writes checkpoints and logs.

TRPO differentiates with ``torch.autograd.grad`` (no ``.grad`` to all-reduce) and is refused.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, Callable, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

from teamtr.core import TeamTRError
from teamtr.rl import Minibatch, Rollout

T = TypeVar("T")
LocalEvaluate = Callable[[Tensor], tuple[Tensor, Tensor]]

#: The per-decision fields a rollout carries between ranks (``rl/rollout.py``'s field table).
FIELDS = ("logp", "ref_logp", "mask", "actions", "values", "rewards", "terminated", "truncated",
          "episode_id", "bootstrap_values", "handles", "group_id")


def select(rollout: Rollout, index: Tensor) -> Rollout:
    """The decisions of ``rollout`` at ``index`` ([n] long), as a new rollout (no advantages)."""
    return Rollout.from_tensors(**{k: getattr(rollout, k)[index] for k in FIELDS})


def merge_rollouts(parts: Sequence[Rollout]) -> Rollout:
    """Rank k's rollout ``parts[k]``, concatenated in rank order; episode ids become ``id * K + k``
    (``K = len(parts)``) so episodes of different ranks never share an id."""
    merged = Rollout()
    for k, part in enumerate(parts):
        if len(part):
            fields = {f: getattr(part, f) for f in FIELDS}
            fields["episode_id"] = fields["episode_id"] * len(parts) + k
            merged.append(**fields)
    return merged


class RankSeeds:
    """Rank ``rank``'s share of a shared seed stream: every rank reserves the same global block of
    ``n * world_size`` seeds (so the stream's state, which rank 0 checkpoints, is equal on all ranks)
    and takes its own slice of it."""

    def __init__(self, seeds: Any, rank: int, world_size: int) -> None:
        self.inner, self.rank, self.world_size = seeds, rank, world_size

    @property
    def next(self) -> int:
        return int(self.inner.next)

    def take(self, n: int) -> int:
        return self.inner.take(n * self.world_size) + self.rank * n


class Distributed:
    """This process's place in the process group: ``rank`` of ``world_size`` (1: no group at all)."""

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        self.rank, self.world_size = rank, world_size
        self.offsets = torch.zeros(1, dtype=torch.long)  # where each rank's decisions start, + the end

    @classmethod
    def from_env(cls) -> Distributed:
        """Join the group ``torchrun`` describes (``WORLD_SIZE`` > 1), on gloo for the CPU and nccl
        for CUDA; without ``WORLD_SIZE`` this process learns alone."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size <= 1:
            return cls()
        if not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend, timeout=timedelta(minutes=60))
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def share(self, episodes: int, what: str = "rollout.episodes") -> int:
        """This rank's episodes of ``episodes`` (which must split evenly)."""
        if episodes % self.world_size:
            raise TeamTRError(f"{what} = {episodes} does not split over {self.world_size} processes: "
                              f"make it a multiple of the process count (torchrun --nproc-per-node).")
        return episodes // self.world_size

    def gather_objects(self, items: list[Any]) -> list[Any]:
        """Every rank's ``items``, concatenated in rank order (pickled; for small things)."""
        if not self.active:
            return list(items)
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, items)
        return [x for part in out for x in part]

    def gather_rollout(self, local: Rollout) -> Rollout:
        """The global rollout (``merge_rollouts`` of every rank's); remembers who owns which rows."""
        if not self.active:
            return local
        parts: list[Any] = [None] * self.world_size
        dist.all_gather_object(parts, {f: getattr(local, f) for f in FIELDS} if len(local) else None)
        rollouts = [Rollout.from_tensors(**p) if p is not None else Rollout() for p in parts]
        self.offsets = torch.tensor([0] + [len(r) for r in rollouts]).cumsum(0)
        return merge_rollouts(rollouts)

    def sharded_evaluate(self, evaluate: LocalEvaluate, params: Sequence[Tensor]
                         ) -> Callable[[Minibatch], tuple[Tensor, Tensor]]:
        """An ``evaluate(mb) -> (scores [B, C], values [B])`` over the global rollout from a rank-local
        ``evaluate(handles) -> (scores [b, c<=C], values [b])``: each rank scores the rows it owns and
        gets the others' scores by all-gather (only its own rows carry gradients). ``params``: the
        trainable tensors, tied in with a zero so every rank's backward reaches all of them."""
        if not self.active:
            return lambda mb: evaluate(mb.handles)

        def sharded(mb: Minibatch) -> tuple[Tensor, Tensor]:
            owner = torch.searchsorted(self.offsets, mb.index, right=True) - 1  # [B]
            mine = (owner == self.rank).nonzero().squeeze(1)
            width = mb.mask.shape[1]
            scores, values = _own_rows(evaluate, mb.handles[mine], width, params)
            device = scores.device
            rows = [(owner == k).nonzero().squeeze(1).to(device) for k in range(self.world_size)]
            most = max(len(r) for r in rows)
            packed = torch.zeros(most, width + 1, device=device)
            packed[: len(mine)] = torch.cat([scores, values[:, None]], 1).detach().float()
            gathered = [torch.empty_like(packed) for _ in range(self.world_size)]
            dist.all_gather(gathered, packed)
            full = torch.zeros(len(mb), width + 1, device=device)
            for k, r in enumerate(rows):
                if k != self.rank:
                    full[r] = gathered[k][: len(r)]
            full = full.index_put((rows[self.rank],), torch.cat([scores, values[:, None]], 1).float())
            return full[:, :width], full[:, width]

        return sharded

    @contextlib.contextmanager
    def reduce_gradients(self, params: Sequence[Tensor]) -> Iterator[None]:
        """While open, every backward pass ends with one all-reduce (sum) of ``params``' gradients."""
        if not self.active:
            yield
            return
        params = list(params)
        queued = [False]

        def all_reduce() -> None:
            queued[0] = False
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            for p, g in zip(params, torch.split(flat, [g.numel() for g in grads])):
                p.grad = g.view_as(p).to(p.dtype)

        def on_grad(_: Tensor) -> None:
            if not queued[0]:
                queued[0] = True
                torch.autograd.Variable._execution_engine.queue_callback(all_reduce)

        hooks = [p.register_post_accumulate_grad_hook(on_grad) for p in params]
        try:
            yield
        finally:
            for h in hooks:
                h.remove()

    def from_main(self, make: Callable[[], T]) -> T:
        """``make()`` run on rank 0 alone and its result sent to every rank; a ``TeamTRError`` there is
        raised on every rank (so a bad config stops the whole group, not rank 0 alone)."""
        if not self.active:
            return make()
        box: list[Any] = [None]
        error: TeamTRError | None = None
        if self.is_main:
            try:
                box = [("ok", make())]
            except TeamTRError as err:
                error, box = err, [("error", str(err))]
        dist.broadcast_object_list(box, src=0)
        kind, value = box[0]
        if error is not None:
            raise error
        if kind == "error":
            raise TeamTRError(f"rank 0 stopped: {value}")
        return value

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def close(self) -> None:
        if self.active and dist.is_initialized():
            dist.destroy_process_group()


def _own_rows(evaluate: LocalEvaluate, handles: Tensor, width: int, params: Sequence[Tensor]
              ) -> tuple[Tensor, Tensor]:
    """This rank's rows: scores [b, width] and values [b], plus a zero tied to every parameter."""
    device = params[0].device if params else torch.device("cpu")
    tie = sum(p.reshape(-1)[0] * 0 for p in params) if params else torch.zeros((), device=device)
    if len(handles) == 0:
        return torch.zeros(0, width, device=device) + tie, torch.zeros(0, device=device) + tie
    scores, values = evaluate(handles)
    scores = torch.nn.functional.pad(scores.float(), (0, width - scores.shape[1]))
    return scores + tie, values.float() + tie


def rank_seed(seed: int, rank: int, iteration: int) -> int:
    """The sampling seed of rank ``rank`` from ``iteration`` on (rank 0: the run's seed, unchanged)."""
    return seed if rank == 0 else seed * 1_000_003 + rank * 7_919 + iteration
