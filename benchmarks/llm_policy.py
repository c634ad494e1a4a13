"""Speed of the LLM signal policy on the surrogate (OracleTSC Alg. 1 on CPU).

1. Generated tokens (and decisions) per second with G answers sampled in one batched
   ``generate`` call (what ``LMPolicy.sample`` does, Alg. 1) against the reference of G
   sequential one-answer calls on the same prompts, measured in the same run. Tokens are the
   answers' tokens including the end token; both ways sample the same distribution, so their
   answer lengths agree up to sampling noise (both totals are printed). Also the batched call
   through ``model.generate`` with the LoRA adapters applied unmerged (what GPU and 4-bit runs
   do) against what ``LMPolicy`` samples with on CPU: ``SmallDecoder`` on a merged copy.
2. Episodes played together (``LMPolicy.sample_each``, what evaluation and checkpoint selection
   do): one answer to each of ``--together`` prompts in one batch, against the reference of one
   call per prompt, in the same run.
3. PPO update tokens per second (``LMPolicy.update`` on a buffer of 400 s of exchanges = 40
   decisions, §4.1.3: scoring old and reference log-probs and values, then the clipped
   update) against the reference of one plain supervised forward/backward on the same tokens.

The surrogate is the one the notebooks use (hidden 128, 2 layers), supervised briefly on a
short collection episode; one torch thread, as each notebook job gets. Run:

    .venv/bin/python benchmarks/llm_policy.py [--scenario cologne1] [--group 8] [--decisions 40] [--together 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from llmtraffic.rl.llm_ppo import LMPolicy
from llmtraffic.signal.surrogate import (SurrogateConfig, _answer_loss, collect_states, compact_prompt,
                                         load_surrogate, surrogate_ppo_config, train_surrogate)


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def rate(label: str, tokens: int, seconds: float, decisions: int, note: str = "") -> None:
    print(f"  {label:<29} {tokens / seconds:8.0f} generated tokens/s  ({decisions / seconds:6.1f} decisions/s, "
          f"{tokens} tokens{note})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cologne1", help="cologne1, hangzhou1x1 or synthetic (no data files)")
    parser.add_argument("--group", type=int, default=8, help="G answers per decision")
    parser.add_argument("--decisions", type=int, default=40, help="decisions per timing (40 = one 400-s buffer)")
    parser.add_argument("--together", type=int, default=3, help="episodes played together (eval seeds, checkpoints)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    cfg = SurrogateConfig(scenario=args.scenario, collect_seeds=(1000,), episode_s=10 * args.decisions, steps=100)
    policy_model, tok = load_surrogate(train_surrogate(cfg))
    policy = LMPolicy(policy_model, tok, surrogate_ppo_config(group_size=args.group))
    prompts = [compact_prompt(s) for s in collect_states(cfg)][: args.decisions]
    n = len(prompts)

    counted = {"batched": 0, "sequential": 0}

    def n_tokens(texts: list[str]) -> int:
        return sum(len(tok(t, add_special_tokens=False).input_ids) + 1 for t in texts)  # + the end token

    def batched():
        counted["batched"] = 0
        for p in prompts:
            counted["batched"] += n_tokens(policy.sample(p, rng=np.random.default_rng(0), record=False)[0])

    def sequential():
        counted["sequential"] = 0
        for p in prompts:
            for i in range(args.group):
                counted["sequential"] += n_tokens(policy.sample(p, group_size=1, rng=np.random.default_rng(i), record=False)[0])

    policy.merge_sampler = False  # the adapters applied unmerged (what GPU and 4-bit runs do)
    t_unmerged = median_time(batched, args.repeats)
    tu = counted["batched"]
    policy.merge_sampler = True
    t_batched, t_seq = median_time(batched, args.repeats), median_time(sequential, args.repeats)
    tb, ts = counted["batched"], counted["sequential"]
    print(f"sampling, G = {args.group}, {n} decisions ({args.scenario} prompts, {policy.cfg.max_new_tokens} tokens max)")
    rate("batched (one generate of G)", tb, t_batched, n)
    rate("sequential (G generates of 1)", ts, t_seq, n, "; reference")
    print(f"  ratio batched / sequential    {(tb / t_batched) / (ts / t_seq):8.2f}x tokens/s")
    rate("batched, generate over LoRA", tu, t_unmerged, n)
    print(f"  ratio SmallDecoder / generate {(tb / t_batched) / (tu / t_unmerged):8.2f}x tokens/s")

    k = args.together
    groups = [prompts[i : i + k] for i in range(0, n - k + 1, k)]
    counted["together"] = counted["alone"] = 0

    def together():
        counted["together"] = sum(n_tokens(policy.sample_each(g, [np.random.default_rng(i) for i in range(k)]))
                                  for g in groups)

    def alone():
        counted["alone"] = sum(n_tokens([policy.sample(p, 1, rng=np.random.default_rng(i), record=False)[0][0]
                                         for i, p in enumerate(g)]) for g in groups)

    t_together, t_alone = median_time(together, args.repeats), median_time(alone, args.repeats)
    tt, ta = counted["together"], counted["alone"]
    print(f"{k} episodes together, one answer each, {len(groups)} decisions")
    rate(f"together (one batch of {k})", tt, t_together, len(groups))
    rate("one call per episode", ta, t_alone, len(groups), "; reference")
    print(f"  ratio together / one by one   {(tt / t_together) / (ta / t_alone):8.2f}x tokens/s")

    rng = np.random.default_rng(1)

    def fill_buffer():
        buffer = []
        for p in prompts:
            _, ex = policy.sample(p, rng=rng)
            ex.reward = float(rng.normal())
            buffer.append(ex)
        return buffer

    update_times, tokens = [], 0
    for _ in range(args.repeats + 1):
        buffer = fill_buffer()
        start = time.perf_counter()
        policy.update(buffer)
        update_times.append(time.perf_counter() - start)
    update_times = update_times[1:]  # the first is the warm-up
    answer_tokens = sum(len(ex.answer_ids) for ex in buffer)
    tokens = sum(len(ex.prompt_ids) + len(ex.answer_ids) for ex in buffer)
    prompt_lists = [ex.prompt_ids.tolist() for ex in buffer]
    answer_lists = [ex.answer_ids.tolist() for ex in buffer]
    base = policy.model.get_base_model()
    mb = policy.cfg.minibatch_size

    def supervised():
        for start in range(0, n, mb):
            base.zero_grad()
            _answer_loss(base, prompt_lists[start : start + mb], answer_lists[start : start + mb],
                         tok.pad_token_id).backward()

    t_update, t_sup = statistics.median(update_times), median_time(supervised, args.repeats)
    base.zero_grad()
    print(f"PPO update on {n} exchanges ({tokens} prompt+answer tokens, {answer_tokens} answer tokens)")
    print(f"  LMPolicy.update                {tokens / t_update:8.0f} tokens/s  ({answer_tokens / t_update:6.0f} answer tokens/s, {t_update:.2f} s)")
    print(f"  supervised forward/backward    {tokens / t_sup:8.0f} tokens/s  (reference, {t_sup:.2f} s)")
    print(f"  ratio update / reference time  {t_update / t_sup:8.2f}x  (update = 2 scoring passes + forward/backward)")


if __name__ == "__main__":
    main()
