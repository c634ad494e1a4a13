"""Speed of OracleTSC on a real pretrained backbone on this CPU (SmolLM2-135M-Instruct by default).

1. Decisions per second at G answers per decision, ours against Hugging Face's ``generate``,
   in the same run, on the same prompts (the first ``--decisions`` states of a max-queue
   episode): ``LMPolicy.sample`` through ``SmallDecoder`` (the merged adapters, the constant
   prompt prefix pre-filled once per adapter version, the G answers sharing one prefill of the
   rest, answers stopped at ``</signal>``) against ``LMPolicy.sample`` with the adapters
   unmerged through ``model.generate`` (what GPU and 4-bit runs do; the same stop text).
2. Seconds per PPO update (``LMPolicy.update``: scoring log pi_old, log pi_ref and V_old, then
   the clipped update; answer-token logits only) on a buffer of ``--decisions`` exchanges with
   random rewards, at the given ``--lora-layers`` (0 = the paper's LoRA on every layer).

The settings default to the ``quick`` profile's real-backbone settings (``brief`` prompt without
history, 10 new tokens, stop at ``</signal>``); decisions are timed at one torch thread (what each
notebook job gets) and at two (the whole machine), the PPO update at the first. Run:

    .venv/bin/python benchmarks/llm_backbone.py [--backbone smollm2-135m] [--scenario cologne1] [--group 8]
        [--decisions 12] [--generate-decisions 3] [--lora-layers 4] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from llmtraffic.signal.backbones import episode_states, load_backbone
from llmtraffic.signal.prompt import parse_phase

QUICK = dict(prompt="brief", prompt_history=0, stop_text="</signal>", max_new_tokens=10)
"""The quick profile's real-backbone settings (params/tsc_main/quick.yaml, ``real.ppo``)."""
TARGET_S, TARGET_RATIO = 1.5, 10.0
"""A G = 8 decision at quick's prompt on this 2-core machine, and ours against ``generate``."""


def play(policy, prompts, states, g: int) -> tuple[float, float, int, int]:
    """Wall and CPU seconds for one G-answer decision per prompt; answers naming a phase; answers.
    CPU seconds are this process's: on a shared machine the wall time also counts waiting."""
    rng = np.random.default_rng(0)
    start, cpu = time.perf_counter(), time.process_time()
    valid = total = 0
    for prompt, state in zip(prompts, states):
        texts, _ = policy.sample(prompt, group_size=g, rng=rng, record=False)  # not scored by the timed update
        valid += sum(parse_phase(t, state.phases) is not None for t in texts)
        total += len(texts)
    return time.perf_counter() - start, time.process_time() - cpu, valid, total


def decide(policy, prompts, states, args, threads: int) -> None:
    """Ours against ``generate`` at ``threads`` torch threads, ours after one untimed decision
    (its constant prefix is pre-filled once per adapter version, as in an episode)."""
    n, k = len(prompts), min(args.generate_decisions, len(prompts))
    play(policy, prompts[:1], states[:1], args.group)
    ours, ours_cpu, valid, total = play(policy, prompts, states, args.group)
    target = "ok" if ours / n <= TARGET_S else "MISSED"
    print(f"  {threads} thread(s): ours (SmallDecoder, prefix kept)   {n / ours:6.3f} decisions/s  ({ours / n:.2f} s wall, "
          f"{ours_cpu / n:.2f} CPU-s per decision, target <= {TARGET_S} s: {target}; {valid}/{total} answers name a phase)")
    policy.merge_sampler = False  # the adapters applied unmerged through generate (no state kept between calls)
    hf, hf_cpu, valid, total = play(policy, prompts[:k], states[:k], args.group)
    policy.merge_sampler = True
    print(f"  {threads} thread(s): HF generate (LoRA unmerged)        {k / hf:6.3f} decisions/s  ({hf / k:.2f} s wall, "
          f"{hf_cpu / k:.2f} CPU-s per decision; {valid}/{total} answers name a phase; reference)")
    ratio = (n / ours) / (k / hf)
    print(f"  {threads} thread(s): ratio ours / generate              {ratio:6.1f}x decisions/s wall "
          f"(target >= {TARGET_RATIO:g}x: {'ok' if ratio >= TARGET_RATIO else 'MISSED'}), "
          f"{(n / ours_cpu) / (k / hf_cpu):.1f}x per CPU-s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="smollm2-135m")
    parser.add_argument("--scenario", default="cologne1")
    parser.add_argument("--group", type=int, default=8, help="G answers per decision")
    parser.add_argument("--decisions", type=int, default=12, help="decisions timed through ours (and the PPO buffer)")
    parser.add_argument("--generate-decisions", type=int, default=3, help="decisions timed through generate")
    parser.add_argument("--lora-layers", type=int, default=4, help="adapted top layers (0 = every layer, the paper's)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="torch threads to time at (1: what each notebook job gets; 2: the whole machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads[0])

    start = time.perf_counter()
    policy, prompter = load_backbone(args.backbone, args.scenario,
                                     ppo={**QUICK, "group_size": args.group, "lora_layers": args.lora_layers})
    print(f"{args.backbone}: loaded in {time.perf_counter() - start:.1f} s ({args.threads[0]} torch thread(s))")
    pairs = episode_states(args.scenario, args.decisions)
    states = [s for s, _ in pairs]
    prompts = [prompter(s, h) for s, h in pairs]
    lengths = [len(policy.tokenizer(p, add_special_tokens=False).input_ids) for p in prompts]
    print(f"{len(prompts)} {args.scenario} prompts of {min(lengths)}-{max(lengths)} tokens, G = {args.group}, "
          f"{policy.cfg.max_new_tokens} new tokens at most, stop at {policy.cfg.stop_text!r}")

    for threads in args.threads:
        torch.set_num_threads(threads)
        decide(policy, prompts, states, args, threads)
    torch.set_num_threads(args.threads[0])

    rng = np.random.default_rng(1)
    buffer = []
    for prompt in prompts:
        _, ex = policy.sample(prompt, group_size=args.group, rng=rng)
        ex.reward = float(rng.normal())
        buffer.append(ex)
    tokens = sum(len(ex.prompt_ids) + len(ex.answer_ids) for ex in buffer)
    start, cpu = time.perf_counter(), time.process_time()
    stats = policy.update(buffer)
    took, took_cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"PPO update on {len(buffer)} exchanges ({tokens} prompt+answer tokens, minibatch {policy.cfg.minibatch_size}, "
          f"LoRA on the top {args.lora_layers or 'all'} layers): {took:.1f} s wall, {took_cpu:.1f} CPU-s "
          f"({took_cpu / len(buffer):.2f} CPU-s per exchange; policy loss {stats['policy_loss']:.3f})")


if __name__ == "__main__":
    main()
