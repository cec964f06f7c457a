"""float32 vs bfloat16 trunk: acting and all-layer update speed, and how far the log-probs move.

For each dtype: SmolLM2-135M with LoRA on every layer (B perturbed so the adapter matters), ``--states``
real escape-room decisions of 13 candidates. ``act`` = one batched prefix-shared scoring call
(decisions/s, median of ``--repeats``); ``update`` = ``evaluate`` with gradients + backward over the
same batch (samples/s, median). Then the largest and mean |log-prob| gap between the two dtypes on
the same decisions, and how often their greedy choices agree. The output layer and the LoRA weights
stay float32 in both (``CandidateScorer._logits``).

    python benchmarks/dtype.py                 # CPU; bf16 pays off with AVX512-BF16 or AMX
    python benchmarks/dtype.py --device cuda
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import escape_decisions, median, machine_line, table, timed, write_json  # noqa: E402

from teamtr.policy.backbone import load_backbone  # noqa: E402
from teamtr.policy.coordinator import Coordinator  # noqa: E402


def measure(model: str, device: str, dtype: str, decisions: list, repeats: int) -> dict:
    bb = load_backbone(model, device=device, dtype=dtype)
    torch.manual_seed(0)  # the same LoRA initialisation and perturbation for every dtype
    coord = Coordinator(bb, train_layers="all")
    with torch.no_grad():
        for name, p in coord.peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.01)
    coord.weights_changed()
    act_s, out = [], None
    for _ in range(repeats):
        coord.forget()
        coord.weights_changed()  # cold prefix memo: the prefix is paid every time
        seconds, out = timed(lambda: coord.act(decisions, greedy=True, keep=True), bb.device)
        act_s.append(seconds)

    def update() -> None:
        scores, values = coord.evaluate(out.handles)
        (scores[out.mask.to(scores.device)].sum() + values.sum()).backward()
        coord.peft.zero_grad(set_to_none=True)

    upd_s = [timed(update, bb.device)[0] for _ in range(repeats)]
    result = {
        "dtype": dtype,
        "act_decisions_per_s": len(decisions) / median(act_s),
        "update_samples_per_s": len(decisions) / median(upd_s),
        "logp": out.logp.float().cpu(),
        "mask": out.mask.cpu(),
    }
    del coord, bb
    gc.collect()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--states", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="results/dtype.json")
    args = parser.parse_args()
    if args.states < 1 or args.repeats < 1:
        parser.error("--states and --repeats must be >= 1")
    decisions = escape_decisions(args.states, candidates=13)
    runs = [measure(args.model, args.device, dt, decisions, args.repeats) for dt in ("float32", "bfloat16")]
    full, half = runs
    mask = full["mask"]
    gap = (full["logp"] - half["logp"])[mask].abs()
    agree = (full["logp"].argmax(-1) == half["logp"].argmax(-1)).float().mean().item()
    rows = [[r["dtype"], r["act_decisions_per_s"], r["update_samples_per_s"]] for r in runs]
    rows.append(["bf16 / fp32", half["act_decisions_per_s"] / full["act_decisions_per_s"],
                 half["update_samples_per_s"] / full["update_samples_per_s"]])
    print(machine_line())
    print(table(["trunk dtype", "act (decisions/s)", "all-layer update (samples/s)"], rows))
    print(f"log-prob gap bf16 vs fp32: max {gap.max().item():.3f}, mean {gap.mean().item():.4f} nats; "
          f"greedy choices agree on {agree:.2%} of {args.states} decisions")
    payload = {
        "args": vars(args),
        "rows": [{k: v for k, v in r.items() if k not in ("logp", "mask")} for r in runs],
        "act_ratio": half["act_decisions_per_s"] / full["act_decisions_per_s"],
        "update_ratio": half["update_samples_per_s"] / full["update_samples_per_s"],
        "logp_gap_max": gap.max().item(),
        "logp_gap_mean": gap.mean().item(),
        "greedy_agreement": agree,
    }
    print(f"wrote {write_json(args.out, payload)}")


if __name__ == "__main__":
    main()
