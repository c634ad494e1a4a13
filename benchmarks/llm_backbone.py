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
3. Answers constrained to the phases (``PPOConfig.answer = "constrained"``, ``--constrained``):
   a training decision (G answers drawn from the exact phase distribution, the hidden states
   below the adapters kept for the update) against today's sampler above, with its token counts
   (the prompt's kept prefix, the tokens computed per decision); a PPO update on the buffer of
   one 400-s window (40 exchanges) reusing the rollout's states, against the same update
   recomputing them; and the minutes of a whole 3,600-s training episode (360 decisions, 10
   updates, the simulator's own time measured on a max-queue episode) from these.

The settings default to the ``quick`` profile's real-backbone settings (``brief`` prompt without
history, 10 new tokens, stop at ``</signal>``); decisions are timed at one torch thread (what each
notebook job gets) and at two (the whole machine), the PPO update at the first. Run:

    .venv/bin/python benchmarks/llm_backbone.py [--backbone smollm2-135m] [--scenario cologne1] [--group 8]
        [--decisions 12] [--generate-decisions 3] [--lora-layers 4] [--threads 1 2] [--constrained [--window 40]]

e.g. ``--scenario hangzhou1x1 --decisions 4 --generate-decisions 1 --threads 1 --constrained`` for part 3 beside
today's sampler on the same prompts.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from llmtraffic.signal.backbones import episode_states, load_backbone
from llmtraffic.signal.prompt import parse_phase

# `make bench` times the constrained answers (part 3) beside today's sampler, on Hangzhou's quick prompt.
BENCH_ARGS = ["--scenario", "hangzhou1x1", "--decisions", "4", "--generate-decisions", "1", "--threads", "1",
              "--constrained"]
BENCH_TIMEOUT_S = 1500

QUICK = dict(prompt="brief", prompt_history=0, stop_text="</signal>", max_new_tokens=10)
"""The quick profile's real-backbone settings (params/tsc_main/quick.yaml, ``real.ppo``)."""
TARGET_S, TARGET_RATIO = 1.5, 10.0
"""A G = 8 decision at quick's prompt on this 2-core machine, and ours against ``generate``."""
TARGET_CONSTRAINED_S, TARGET_EPISODE_MIN = 0.4, 5.0
"""A constrained training decision (G = 8, one thread), and a 3,600-s training episode (minutes)."""


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
    parser.add_argument("--constrained", action="store_true", help="also time constrained answers (part 3)")
    parser.add_argument("--window", type=int, default=40, help="exchanges per PPO update of part 3 (400 s / 10 s)")
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
    if args.constrained:
        constrained(args, policy.tokenizer)


def timed(fn) -> tuple[float, float, object]:
    """Wall and CPU seconds of ``fn()`` and its result."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - start, time.process_time() - cpu, out


def constrained(args, tokenizer) -> None:
    """Part 3 (see the module docstring), at one torch thread, on a fresh policy."""
    from llmtraffic.rl.small_decoder import common_prefix
    from llmtraffic.signal.controls import MaxQueueController
    from llmtraffic.signal.env import SignalConfig, SignalEnv
    from llmtraffic.signal.prompt import answer_choices

    torch.set_num_threads(1)
    policy, prompter = load_backbone(args.backbone, args.scenario, ppo={
        **QUICK, "group_size": args.group, "lora_layers": args.lora_layers, "answer": "constrained"})
    pairs = episode_states(args.scenario, args.window + 1)
    prompts = [prompter(s, h) for s, h in pairs]
    choices = answer_choices(pairs[0][0])
    trie = policy.trie(choices)
    ids = [torch.tensor(tokenizer(p, add_special_tokens=False).input_ids) for p in prompts]
    kept = min(common_prefix(ids[0], i) for i in ids[1:])
    rest = int(np.mean([len(i) for i in ids])) - kept
    tail = int(trie.lengths.float().mean()) - 1
    print(f"constrained answers, {args.scenario}: {len(choices)} phases, answers of {trie.lengths.min()}-{trie.lengths.max()} "
          f"tokens; prompt {kept} kept + ~{rest} new tokens; per decision ~{rest} + {trie.rows.numel()} trie-row + ~{tail} "
          f"answer tokens (below the adapters) = ~{rest + trie.rows.numel() + tail} tokens, "
          f"~{0.27 * (rest + trie.rows.numel() + tail):.0f} GFLOP at 0.27 GFLOP/token")
    rng = np.random.default_rng(2)
    policy.sample(prompts[0], rng=rng, choices=choices, record=False)  # the kept prefix, pre-filled once
    buffer = []

    def decide_all():
        for prompt in prompts[1:]:
            _, ex = policy.sample(prompt, rng=rng, choices=choices)
            ex.reward = float(rng.normal())
            buffer.append(ex)

    spent = {"prefill_each": 0.0, "extend": 0.0}
    wall, cpu, _ = timed(lambda: with_timers(spent, decide_all))
    n = len(prompts) - 1
    per = cpu / n  # CPU seconds: on a shared machine the wall time also counts waiting for a core
    print(f"  training decision (G = {args.group}, exact distribution, states kept): {wall / n:.3f} s wall, {per:.3f} CPU-s "
          f"(target <= {TARGET_CONSTRAINED_S} s: {'ok' if per <= TARGET_CONSTRAINED_S else 'MISSED'}); where the CPU goes: "
          f"prompt pre-fill {spent['prefill_each'] / n:.3f} s, trie rows and the answer's states {spent['extend'] / n:.3f} s, "
          f"the rest {(cpu - sum(spent.values())) / n:.3f} s")
    score_wall, score_cpu, _ = timed(policy.score_pending)
    update_wall, update_cpu, stats = timed(lambda: policy.update(buffer))
    print(f"  PPO update on {len(buffer)} exchanges, states reused: scoring {score_wall:.1f} s wall ({score_cpu:.1f} CPU-s), "
          f"update {update_wall:.1f} s wall ({update_cpu:.1f} CPU-s); clip fraction {stats['clip_frac']:.2f}")
    again = []
    for ex in buffer:  # the same exchanges, states recomputed by the scoring (today's path)
        ex.states = ex.old_logp = None
        again.append(ex)
    policy.pending = again
    recompute_wall, recompute_cpu, _ = timed(policy.score_pending)
    print(f"  scoring the same buffer recomputing the states below the adapters: {recompute_wall:.1f} s wall "
          f"({recompute_cpu:.1f} CPU-s)")
    sim = simulator_seconds(args.scenario, MaxQueueController(), SignalEnv, SignalConfig)
    episode = 360 * per + 10 * (score_cpu + update_cpu) + sim
    print(f"  3,600-s training episode (CPU): 360 x {per:.3f} s decisions + 10 x {score_cpu + update_cpu:.1f} s updates + "
          f"{sim:.0f} s simulator = {episode / 60:.1f} min (target <= {TARGET_EPISODE_MIN} min: "
          f"{'ok' if episode / 60 <= TARGET_EPISODE_MIN else 'MISSED'}); at the wall times above "
          f"{(360 * wall / n + 10 * (score_wall + update_wall) + sim) / 60:.1f} min")


def with_timers(spent: dict[str, float], fn) -> None:
    """Run ``fn()`` adding the CPU seconds of each :class:`SmallDecoder` method named in ``spent``."""
    from llmtraffic.rl.small_decoder import SmallDecoder

    originals = {name: getattr(SmallDecoder, name) for name in spent}

    def timer(name):
        def run(*args, **kwargs):
            start = time.process_time()
            try:
                return originals[name](*args, **kwargs)
            finally:
                spent[name] += time.process_time() - start
        return run

    for name in spent:
        setattr(SmallDecoder, name, timer(name))
    try:
        fn()
    finally:
        for name, method in originals.items():
            setattr(SmallDecoder, name, method)


def simulator_seconds(scenario: str, controller, env_cls, cfg_cls) -> float:
    """Wall seconds of one 3,600-s episode of ``scenario`` driven by ``controller``."""

    with env_cls(scenario, cfg_cls(episode_s=3600), seed=0) as env:
        start = time.perf_counter()
        _, info = env.reset(seed=0)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(controller.act(info["state"]))
            done = term or trunc
        return time.perf_counter() - start


if __name__ == "__main__":
    main()
