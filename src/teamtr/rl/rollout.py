"""Rollout storage: one row per coordinator decision, with exact candidate distributions.

Build a ``Rollout`` by ``append``-ing decisions (one decision, or a batch of many teams' ticks at once;
episodes may interleave, each episode's decisions in time order) or in one go with
``Rollout.from_tensors``. Then ``compute_advantages`` fills ``advantages`` and ``returns`` and
``minibatches`` yields shuffled ``Minibatch`` views for the update.

Per-decision fields (N decisions, C = the largest candidate count; shorter rows are padded):

==================  ===========  ==========================================================
field               shape/dtype  meaning
==================  ===========  ==========================================================
logp                [N, C] f32   acting policy's candidate log-probs (padded entries: 0)
ref_logp            [N, C] f32   frozen reference policy's candidate log-probs
mask                [N, C] bool  True for a real candidate; every row has one
actions             [N] long     index of the chosen candidate
values              [N] f32      V(s) from the acting value head
rewards             [N] f32      team reward after the decision
terminated          [N] bool     the episode ended for good after this decision
truncated           [N] bool     the episode was cut (time limit, end of collection)
episode_id          [N] long     which episode the decision belongs to
bootstrap_values    [N] f32      V(next state), read only where truncated (default 0)
handles             [N] long     the trainer's index into its cached activations (default -1)
group_id            [N] long     episodes sharing a world seed share it (group baselines; default -1)
==================  ===========  ==========================================================
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from teamtr.rl.advantages import GROUP_ESTIMATORS, episode_returns, gae, group_advantages
from teamtr.rl.advantages import normalize as normalize_advantages
from teamtr.rl.errors import RLInputError
from teamtr.rl.losses import check_mask

_CANDIDATE_FIELDS = ("logp", "ref_logp", "mask")
_DECISION_FIELDS = ("actions", "values", "rewards", "terminated", "truncated", "episode_id",
                    "bootstrap_values", "handles", "group_id")
_DTYPES = {"logp": torch.float32, "ref_logp": torch.float32, "mask": torch.bool,
           "actions": torch.long, "values": torch.float32, "rewards": torch.float32,
           "terminated": torch.bool, "truncated": torch.bool, "episode_id": torch.long,
           "bootstrap_values": torch.float32, "handles": torch.long, "group_id": torch.long}


@dataclass
class Minibatch:
    """A view of some decisions of a rollout; every tensor is indexed like ``index``.

    ``index`` [B] long holds the decisions' positions in the rollout. The candidate tensors are cut to
    the widest row *in this minibatch*, so ``evaluate(mb)`` must return scores of ``mb.mask.shape``.
    ``advantages`` and ``returns`` are those of ``Rollout.compute_advantages`` (normalised if asked).
    """

    index: Tensor
    logp: Tensor
    ref_logp: Tensor
    mask: Tensor
    actions: Tensor
    values: Tensor
    rewards: Tensor
    advantages: Tensor
    returns: Tensor
    episode_id: Tensor
    handles: Tensor

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def split(self, size: int) -> list[Minibatch]:
        """Consecutive chunks of at most ``size`` decisions (near-equal sizes), each cut to its own
        widest row, as ``Rollout.subset`` cuts a minibatch."""
        if size < 1:
            raise RLInputError(f"micro-batch size = {size!r} is out of range; allowed: >= 1.")
        out = []
        for rows in torch.tensor_split(torch.arange(len(self)), -(-len(self) // size)):
            mask = self.mask[rows]
            width = int(mask.any(dim=0).nonzero().max()) + 1
            out.append(Minibatch(**{f.name: getattr(self, f.name)[rows][:, :width]
                                    if f.name in ("logp", "ref_logp", "mask") else getattr(self, f.name)[rows]
                                    for f in fields(self)}))
        return out

    def to(self, device: torch.device | str) -> Minibatch:
        """The same minibatch with every tensor on ``device`` (itself if already there)."""
        if self.mask.device == torch.device(device):
            return self
        return Minibatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


class Rollout:
    """Decisions collected by the acting policy; see the module docstring for the fields."""

    def __init__(self) -> None:
        self._chunks: list[dict[str, Tensor]] = []
        self._data: dict[str, Tensor] | None = None
        self.advantages: Tensor | None = None
        self.returns: Tensor | None = None

    @classmethod
    def from_tensors(cls, **fields: Tensor) -> Rollout:
        """A rollout from whole ``[N, ...]`` tensors (the field names of the module docstring)."""
        rollout = cls()
        rollout.append(**fields)
        return rollout

    def append(
        self,
        *,
        logp: Tensor,
        ref_logp: Tensor,
        mask: Tensor,
        actions: Tensor | int,
        values: Tensor | float,
        rewards: Tensor | float,
        terminated: Tensor | bool,
        truncated: Tensor | bool,
        episode_id: Tensor | int,
        bootstrap_values: Tensor | float | None = None,
        handles: Tensor | int | None = None,
        group_id: Tensor | int | None = None,
    ) -> None:
        """Add decisions: candidate fields ``[n, C]`` (or ``[C]`` for one), others ``[n]`` (or scalars).

        Tensors are detached and stored on the CPU (minibatches move to the device of the scores);
        C may differ between appends (rows are padded when the rollout is read).
        """
        raw = {"logp": logp, "ref_logp": ref_logp, "mask": mask, "actions": actions,
               "values": values, "rewards": rewards, "terminated": terminated,
               "truncated": truncated, "episode_id": episode_id,
               "bootstrap_values": 0.0 if bootstrap_values is None else bootstrap_values,
               "handles": -1 if handles is None else handles,
               "group_id": -1 if group_id is None else group_id}
        chunk = {k: torch.as_tensor(v).detach().to("cpu", _DTYPES[k]) for k, v in raw.items()}
        single = chunk["mask"].dim() == 1
        if single:
            chunk = {k: v.unsqueeze(0) if k in _CANDIDATE_FIELDS else v.reshape(1)
                     for k, v in chunk.items()}
        check_mask(chunk["mask"])
        n, c = chunk["mask"].shape
        for k in _CANDIDATE_FIELDS:
            if chunk[k].shape != (n, c):
                raise RLInputError(f"{k} has shape {tuple(chunk[k].shape)} but mask has {(n, c)}.")
        for k in _DECISION_FIELDS:
            if chunk[k].dim() == 0:
                chunk[k] = chunk[k].expand(n).clone()
            if chunk[k].shape != (n,):
                raise RLInputError(f"{k} has shape {tuple(chunk[k].shape)}; expected [{n}].")
        a = chunk["actions"]
        if ((a < 0) | (a >= c)).any() or not chunk["mask"].gather(1, a.clamp(0, c - 1)[:, None]).all():
            raise RLInputError("actions must index a valid (unmasked) candidate of their row.")
        self._chunks.append(chunk)
        self._data = None
        self.advantages = self.returns = None

    def _fields(self) -> dict[str, Tensor]:
        if self._data is None:
            if not self._chunks:
                raise RLInputError("the rollout is empty; append decisions first.")
            width = max(ch["mask"].shape[1] for ch in self._chunks)
            data: dict[str, Tensor] = {}
            for k in _CANDIDATE_FIELDS:
                data[k] = torch.cat([torch.nn.functional.pad(ch[k], (0, width - ch[k].shape[1]))
                                     for ch in self._chunks])
            for k in _DECISION_FIELDS:
                data[k] = torch.cat([ch[k] for ch in self._chunks])
            self._data = data
            self._chunks = [data]  # later appends extend the merged tensors
        return self._data

    def __len__(self) -> int:
        return sum(ch["mask"].shape[0] for ch in self._chunks)

    def __getattr__(self, name: str) -> Tensor:
        # Field access (rollout.logp, rollout.rewards...) reads the merged tensors.
        if name in _DTYPES:
            return self._fields()[name]
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")

    def compute_advantages(self, gamma: float, lam: float, normalize: bool = True,
                           estimator: str = "gae") -> None:
        """Fill ``advantages`` and ``returns`` (value targets: GAE's, from the unnormalised advantages).

        ``estimator``: ``gae`` (the value head's baseline), or a critic-free group baseline, ``group``
        (GRPO) or ``loo`` (RLOO), from each episode's return against the other episodes of its
        ``group_id`` (every decision of an episode gets its episode's advantage). ``normalize``
        rescales over the whole rollout (``group`` is normalised per group already).
        """
        f = self._fields()
        adv, ret = gae(f["rewards"], f["values"], f["terminated"], f["truncated"],
                       f["bootstrap_values"], f["episode_id"], gamma, lam)
        if estimator in GROUP_ESTIMATORS:
            adv = self._group_advantages(estimator)
            normalize = normalize and estimator != "group"
        elif estimator != "gae":
            raise RLInputError(f"estimator = {estimator!r} is not known; choose gae, {', '.join(GROUP_ESTIMATORS)}.")
        self.advantages = normalize_advantages(adv) if normalize else adv
        self.returns = ret

    def _group_advantages(self, estimator: str) -> Tensor:
        """[N]: each decision gets the group-baseline advantage of its episode."""
        f = self._fields()
        ids, returns = episode_returns(f["rewards"], f["episode_id"])
        position = torch.searchsorted(ids, f["episode_id"])
        groups = torch.full((len(ids),), -1, dtype=torch.long).scatter_(0, position, f["group_id"])
        mixed = (groups[position] != f["group_id"]).any()
        if mixed or (groups < 0).any():
            raise RLInputError("group baselines need one group_id >= 0 per episode (the world seed's group);"
                               " append decisions with group_id.")
        return group_advantages(returns, groups, estimator)[position]

    def subset(self, index: Tensor) -> Minibatch:
        """The decisions at ``index`` ([B] long) as a ``Minibatch``."""
        if self.advantages is None or self.returns is None:
            raise RLInputError("call compute_advantages(gamma, lam) before reading minibatches.")
        f = self._fields()
        mask = f["mask"][index]
        width = int(mask.any(dim=0).nonzero().max()) + 1
        return Minibatch(
            index=index, logp=f["logp"][index, :width], ref_logp=f["ref_logp"][index, :width],
            mask=mask[:, :width], actions=f["actions"][index], values=f["values"][index],
            rewards=f["rewards"][index], advantages=self.advantages[index],
            returns=self.returns[index], episode_id=f["episode_id"][index],
            handles=f["handles"][index])

    def full_batch(self) -> Minibatch:
        """Every decision, in storage order."""
        return self.subset(torch.arange(len(self)))

    def minibatches(self, size: int, generator: torch.Generator | None = None) -> Iterator[Minibatch]:
        """Shuffle once and yield ``ceil(N / size)`` minibatches of near-equal size (sizes differ by
        at most one, so no tiny last batch gets a full optimiser step)."""
        if size < 1:
            raise RLInputError(f"minibatch size = {size!r} is out of range; allowed: >= 1.")
        n = len(self)
        perm = torch.randperm(n, generator=generator)
        for index in torch.tensor_split(perm, -(-n // size)):
            yield self.subset(index)
