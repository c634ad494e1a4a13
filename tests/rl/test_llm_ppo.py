"""PPO for a language-model policy: hand-computed token math and real tiny-model behaviour."""

import copy
import math

import numpy as np
import pytest
import torch

from llmtraffic.llm.tiny import TinySpec, build_tiny
from llmtraffic.rl.llm_ppo import (
    LMPolicy,
    PPOConfig,
    clipped_surrogate_loss,
    clipped_value_loss,
    discounted_returns,
    disable_cpu_repacking,
    gae,
    k3_kl,
    load_policy_model,
    standardize,
    token_rewards,
    torch_threads,
)
from llmtraffic.rl.small_decoder import SmallDecoder

CORPUS = [f"<signal>{x}</signal> queue {i} near {i + 1}" for x in ("ETWT", "NTST", "ELWL", "NLSL") for i in range(9)]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with torch_threads(1):
        yield


def tiny(seed: int = 0, hidden: int = 32):
    return build_tiny(CORPUS, TinySpec(hidden=hidden, intermediate=2 * hidden, seed=seed))


# ----------------------------------------------------------------------------- token math


def test_k3_is_hand_value_nonnegative_and_zero_when_policies_agree():
    # r = pi_ref / pi = 0.25 / 0.5: k3 = 0.5 - ln 0.5 - 1
    assert k3_kl(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])).item() == pytest.approx(0.193147, abs=1e-6)
    g = torch.Generator().manual_seed(0)
    logp, ref = -5 * torch.rand(1000, generator=g), -5 * torch.rand(1000, generator=g)
    assert (k3_kl(logp, ref) >= 0).all()
    assert torch.equal(k3_kl(logp, logp), torch.zeros(1000))


def test_token_rewards_eq_1_kl_on_every_token_reward_on_last():
    r = token_rewards(2.0, torch.tensor([math.log(0.5), -1.0]), torch.tensor([math.log(0.25), -1.0]), beta=0.05)
    assert r.tolist() == pytest.approx([-0.05 * 0.193147, 2.0], abs=1e-7)


def test_gae_hand_worked_example():
    # gamma 0.9, lambda 0.5, V(s_3) = 0:
    # d2 = 1 - 0.8 = 0.2                A2 = 0.2
    # d1 = 0.9*0.8 - 0.4 = 0.32         A1 = 0.32 + 0.45*0.2 = 0.41
    # d0 = 0.9*0.4 - 0.5 = -0.14        A0 = -0.14 + 0.45*0.41 = 0.0445
    adv, ret = gae(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.4, 0.8]), gamma=0.9, lam=0.5)
    assert adv.tolist() == pytest.approx([0.0445, 0.41, 0.2])
    assert ret.tolist() == pytest.approx([0.5445, 0.81, 1.0])
    # lambda = 1 with zero values is the Monte-Carlo return
    adv1, _ = gae(torch.tensor([0.0, 0.0, 1.0]), torch.zeros(3), gamma=0.9, lam=1.0)
    assert adv1.tolist() == pytest.approx(discounted_returns(torch.tensor([0.0, 0.0, 1.0]), 0.9).tolist())
    assert discounted_returns(torch.tensor([0.0, 0.0, 1.0]), 0.9).tolist() == pytest.approx([0.81, 0.9, 1.0])


def test_clipped_surrogate_with_asymmetric_clip_eq_16():
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.7])
    old = torch.zeros(4)
    logp = torch.log(ratio).requires_grad_()
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    mask = torch.ones(4)
    # clip range [0.8, 1.3]: min terms 1.3, 0.5, -1.1, -0.8 → mean -0.025
    loss = clipped_surrogate_loss(logp, old, adv, clip_low=0.2, clip_high=0.3, mask=mask)
    assert loss.item() == pytest.approx(0.025)
    loss.backward()
    # d(-mean)/dlogp = -ratio*A/4 where unclipped, 0 where the clip is active
    assert logp.grad.tolist() == pytest.approx([0.0, -0.125, 0.275, 0.0])
    # symmetric eps = 0.2 caps the first term at 1.2 instead
    assert clipped_surrogate_loss(torch.log(ratio), old, adv, 0.2, 0.2, mask).item() == pytest.approx(0.05)
    # masked tokens do not count
    assert clipped_surrogate_loss(torch.log(ratio), old, adv, 0.2, 0.3, torch.tensor([1.0, 1, 0, 0])).item() == pytest.approx(-0.9)


def test_clipped_value_loss_eq_5():
    # t0: (0.5-1)^2 = 0.25 but clipped move 0.2 → (0.2-1)^2 = 0.64 (max); t1: 0.81 both
    loss = clipped_value_loss(torch.tensor([0.5, 0.1]), torch.zeros(2), torch.ones(2), 0.2, torch.ones(2))
    assert loss.item() == pytest.approx(0.5 * (0.64 + 0.81) / 2)


def test_standardize_ignores_padding():
    x = standardize(torch.tensor([1.0, 3.0, 100.0]), torch.tensor([1.0, 1.0, 0.0]))
    assert x.tolist() == pytest.approx([-1.0, 1.0, 0.0], abs=1e-4)


@pytest.mark.parametrize("field, value", [("clip_low", 1.0), ("gamma", 1.5), ("group_size", 0), ("kl_beta", -0.1)])
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"PPOConfig.{field}"):
        PPOConfig(**{field: value})


# ----------------------------------------------------------------------------- the policy


def test_group_is_one_generate_call_and_reference_equals_policy_at_start():
    model, tok = tiny()
    policy = LMPolicy(model, tok, PPOConfig(group_size=8, max_new_tokens=6))
    calls = []
    sampler = policy._sampler()  # the SmallDecoder of a merged copy (a tiny Qwen2 on CPU)
    sample = sampler.sample
    sampler.sample = lambda prompt, n, *a, **kw: calls.append((n, len(prompt))) or sample(prompt, n, *a, **kw)
    texts, ex = policy.sample("<signal>")
    assert calls == [(8, len(ex.prompt_ids))] and len(texts) == 8
    policy.score_pending()
    assert 1 <= len(ex.answer_ids) <= 6 and ex.old_logp.shape == ex.answer_ids.shape
    # LoRA B starts at zero: adapters change nothing, so the K3 penalty is exactly 0
    assert torch.allclose(ex.old_logp, ex.ref_logp)
    assert (ex.old_logp <= 0).all()


def test_sampler_holds_the_weights_merge_and_unload_gives():
    """The sampler adds peft's delta weights to the base's decoder instead of merging a copy of
    the model: the same sums, so the same weights to the bit (and the same answers)."""
    policy = LMPolicy(*tiny(), PPOConfig(max_new_tokens=6))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    merged = SmallDecoder(copy.deepcopy(policy.model).merge_and_unload().eval())
    ours = policy._sampler()
    for layer, ref in zip(ours.layers, merged.layers, strict=True):
        for name in ("qkv", "o", "gate_up", "down"):
            assert torch.equal(layer[name][0], ref[name][0])
    assert not torch.equal(ours.layers[0]["qkv"][0], policy._reference.layers[0]["qkv"][0])  # the adapters count


def test_update_forward_through_the_decoder_gives_the_wrapped_models_values_and_gradients():
    """The PPO step's forward runs the base's decoder with the adapters as low-rank factors: the
    log-probabilities, values and adapter gradients of the peft-wrapped model."""
    policy = LMPolicy(*tiny(), PPOConfig(max_new_tokens=6))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    exchanges = [policy.sample(prompt)[1] for prompt in ("queue", "queue 3 near 4 near", "<signal>")]
    prompts, answers = [e.prompt_ids for e in exchanges], [e.answer_ids for e in exchanges]
    decoder, factors = policy._trainer()
    assert decoder is policy._reference and len(factors) == len(policy.model.get_base_model().model.layers)

    def run(*fast):
        policy.model.zero_grad()
        logp, values, mask = policy._evaluate(prompts, answers, *fast)
        (logp.sum() + values.sum()).backward()
        return logp, [p.grad.clone() for p in policy.actor_params]

    ref_logp, ref_grads = run()
    logp, grads = run(decoder, policy._factors())
    assert torch.allclose(logp, ref_logp, atol=1e-5)
    assert all(torch.allclose(g, r, rtol=1e-4, atol=1e-6) for g, r in zip(grads, ref_grads, strict=True))
    assert sum(float(g.abs().sum()) for g in grads) > 0
    assert LMPolicy(*tiny(), PPOConfig(lora_dropout=0.1))._trainer() == (None, None)  # one mask per module


def test_batched_scoring_of_padded_exchanges_equals_one_at_a_time():
    policy = LMPolicy(*tiny(), PPOConfig(max_new_tokens=6, minibatch_size=4))
    with torch.no_grad():  # give the adapters weight so policy and reference differ
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    exchanges = [policy.sample(prompt)[1] for prompt in ("queue", "queue 3 near 4 near", "<signal>", "NTST 1")]
    assert len({len(e.prompt_ids) for e in exchanges}) > 1  # prompts of different lengths get padded
    assert isinstance(policy._sampler(), SmallDecoder) and policy._reference is not None  # scored by the decoders
    policy.score_pending()
    assert policy.pending == []
    for ex in exchanges:
        with torch.no_grad():
            logp, values, _ = policy._evaluate([ex.prompt_ids], [ex.answer_ids])
            with policy.model.disable_adapter():
                ref, _, _ = policy._evaluate([ex.prompt_ids], [ex.answer_ids])
        assert torch.allclose(ex.old_logp, logp[0], atol=1e-5) and torch.allclose(ex.old_values, values[0], atol=1e-5)
        assert torch.allclose(ex.ref_logp, ref[0], atol=1e-5)
        assert not torch.allclose(ex.ref_logp, ex.old_logp, atol=1e-3)


def test_sampling_is_seeded_by_config_not_global_state():
    runs = []
    for noise in (1, 2):
        torch.manual_seed(noise)
        model, tok = tiny()
        policy = LMPolicy(model, tok, PPOConfig(max_new_tokens=5, seed=3))
        runs.append([policy.sample("queue")[0] for _ in range(2)])
    assert runs[0] == runs[1]


def test_sample_groups_gives_the_answers_of_one_sample_call_per_prompt():
    """The evaluation's probes: G answers per prompt in one batch (chunks of 2 here), each prompt
    drawn from the seed one ``sample`` call would take from the same generator."""
    import numpy as np

    policy = LMPolicy(*tiny(), PPOConfig(group_size=4, max_new_tokens=6, top_p=0.9))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(2))
    prompts = ["queue", "queue 3 near 4 near", "<signal>", "NTST 1", "queue 3"]
    one = [policy.sample(p, rng=rng, record=False)[0] for rng in [np.random.default_rng(5)] for p in prompts]
    together = policy.sample_groups(prompts, np.random.default_rng(5), chunk=2)
    # Batched rows of other lengths round differently, which on some CPUs flips a token drawn
    # near a boundary; a wrong seeding would change nearly every answer.
    rows = [(a, b) for group_a, group_b in zip(together, one, strict=True) for a, b in zip(group_a, group_b, strict=True)]
    assert sum(a == b for a, b in rows) >= len(rows) - 1 and len({tuple(t) for t in one}) > 1
    assert policy.pending == []  # probes never enter an update
    with pytest.raises(ValueError, match="chunk"):
        policy.sample_groups(prompts, np.random.default_rng(5), chunk=0)


PROMPT = "queue 3 near"


def _two_armed(seed: int = 0):
    """A tiny model taught (full fine-tuning, 40 steps) to start its answer with "A" or "B"
    equally often: a two-armed bandit whose arms PPO must then tell apart."""
    model, tok = tiny(seed)
    with torch.no_grad():  # the default 0.02 init caps logit gaps (tied head after RMSNorm) near P = 0.64
        model.get_input_embeddings().weight.mul_(10)
    ids = tok(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    arms = torch.tensor(tok.convert_tokens_to_ids(["A", "B"]))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(40):
        loss = -torch.log_softmax(model(input_ids=ids).logits[0, -1], -1)[arms].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), tok, arms


def _bandit_buffer(policy, arms, n: int):
    """Exchanges rewarded +1 when the answer starts with arm A, -1 otherwise."""
    buffer = []
    for _ in range(n):
        _, ex = policy.sample(PROMPT, group_size=1)
        ex.reward = 1.0 if int(ex.answer_ids[0]) == int(arms[0]) else -1.0
        buffer.append(ex)
    return buffer


def _prob_arm_a(policy, arms) -> float:
    ids = policy.tokenizer(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        probs = torch.softmax(policy.model(input_ids=ids).logits[0, -1], -1)
    return probs[arms[0]].item()


@pytest.mark.parametrize("use_critic", [True, False])
def test_ppo_raises_probability_of_rewarded_answer(use_critic):
    model, tok, arms = _two_armed()
    cfg = PPOConfig(max_new_tokens=1, actor_lr=3e-3, critic_lr=1e-3, minibatch_size=16, use_critic=use_critic)
    policy = LMPolicy(model, tok, cfg)
    before = _prob_arm_a(policy, arms)
    head = [p.clone() for p in policy.value_head.parameters()]
    for _ in range(6):
        policy.update(_bandit_buffer(policy, arms, 32))
    after = _prob_arm_a(policy, arms)
    assert 0.4 < before < 0.6 and after > 0.9, (before, after)
    moved = any(not torch.equal(a, b) for a, b in zip(head, policy.value_head.parameters()))
    assert moved == use_critic  # REINFORCE (Table 7) leaves the critic alone


def test_checkpoint_resume_continues_exactly(tmp_path):
    model, tok, arms = _two_armed()
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def fresh():
        m, _ = tiny()
        m.load_state_dict(state)
        return LMPolicy(m, tok, PPOConfig(max_new_tokens=3, actor_lr=1e-3, minibatch_size=4))

    a = fresh()
    a.update(_bandit_buffer(a, arms, 8))
    a.save(tmp_path / "ckpt.pt")
    a.update(_bandit_buffer(a, arms, 8))

    b = fresh()
    b.load(tmp_path / "ckpt.pt")
    assert b.updates == 1
    b.update(_bandit_buffer(b, arms, 8))
    for pa, pb in zip(a.actor_params + list(a.value_head.parameters()), b.actor_params + list(b.value_head.parameters())):
        assert torch.equal(pa, pb)

    other = LMPolicy(*tiny(), PPOConfig(max_new_tokens=3, actor_lr=2e-3, minibatch_size=4))
    with pytest.raises(ValueError, match="actor_lr"):
        other.load(tmp_path / "ckpt.pt")
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        other.load(tmp_path / "nope.pt")


def _last_logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        if isinstance(model, SmallDecoder):
            return model.forward(ids)[0][0]
        return model(input_ids=ids).logits[0, -1]


def test_the_merged_sampler_follows_every_change_of_the_adapters(tmp_path):
    """On CPU, answers come from a copy with the adapters merged in: it must be rebuilt after
    each update and each checkpoint load, or the policy would act with stale adapters."""
    model, tok, arms = _two_armed()
    policy = LMPolicy(model, tok, PPOConfig(max_new_tokens=1, actor_lr=3e-3, minibatch_size=16))
    ids = tok(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    start = _last_logits(policy._sampler(), ids)
    assert policy._sampler() is not policy.model and torch.allclose(start, _last_logits(policy.model, ids), atol=1e-5)
    policy.save(tmp_path / "start.pt")
    for _ in range(3):
        policy.update(_bandit_buffer(policy, arms, 32))
        assert torch.allclose(_last_logits(policy._sampler(), ids), _last_logits(policy.model, ids), atol=1e-5)
    assert not torch.allclose(_last_logits(policy._sampler(), ids), start, atol=1e-2)  # it learned
    policy.load(tmp_path / "start.pt")
    assert torch.allclose(_last_logits(policy._sampler(), ids), start, atol=1e-5)


def test_update_rejects_missing_reward():
    policy = LMPolicy(*tiny(), PPOConfig(max_new_tokens=2))
    _, ex = policy.sample("queue")
    with pytest.raises(ValueError, match="reward is None"):
        policy.update([ex])


# ----------------------------------------------------------------------------- 4-bit base


def _lora_grads(policy, ex) -> torch.Tensor:
    policy.model.train()
    policy.model.zero_grad()
    logp, _, mask = policy._evaluate([ex.prompt_ids], [ex.answer_ids])
    (logp * mask).sum().backward()
    return torch.cat([p.grad.flatten() for p in policy.actor_params])


def _quantized_policy(repack: bool):
    model, tok = tiny(hidden=64)
    q = load_policy_model(model, load_in_4bit=True)
    if repack:  # undo the fix to show what it prevents
        import bitsandbytes as bnb

        for m in q.modules():
            if isinstance(m, bnb.nn.Linear4bit):
                m.support_avx512bf16_for_cpu = True
    # LoRA B = 0 at init would make adapter gradients trivially small; give adapters weight.
    policy = LMPolicy(q, tok, PPOConfig(max_new_tokens=4, load_in_4bit=True))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.ones_like(p))
    return policy


def test_4bit_lora_gradients_after_generate_match_a_fresh_copy():
    import bitsandbytes as bnb

    used = _quantized_policy(repack=False)
    assert sum(isinstance(m, bnb.nn.Linear4bit) for m in used.model.modules()) == 14
    assert disable_cpu_repacking(used.model) == 14
    _, ex = used.sample("queue 3 near")  # a no-grad forward: where bitsandbytes would repack
    fresh = _quantized_policy(repack=False)
    after, reference = _lora_grads(used, ex), _lora_grads(fresh, ex)
    assert reference.abs().max() > 1e-3
    assert torch.allclose(after, reference, atol=1e-6)


def test_config_flag_quantizes_a_full_precision_model():
    import bitsandbytes as bnb

    policy = LMPolicy(*tiny(hidden=64), PPOConfig(max_new_tokens=2, load_in_4bit=True))
    layers = [m for m in policy.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == 14 and not any(m.support_avx512bf16_for_cpu for m in layers)


def test_without_the_fix_cpu_repacking_breaks_training():
    from bitsandbytes.functional import has_avx512bf16

    if not has_avx512bf16():
        pytest.skip("this CPU has no AVX512-BF16: bitsandbytes never repacks here")
    broken = _quantized_policy(repack=True)
    _, ex = broken.sample("queue 3 near")
    fresh = _quantized_policy(repack=False)
    try:
        wrong = _lora_grads(broken, ex)
    except RuntimeError:
        return  # crashes on layers with bias (Qwen2's q/k/v): the failure the fix prevents
    assert not torch.allclose(wrong, _lora_grads(fresh, ex), atol=1e-6)


def _stepped_grads(micro: int, checkpointing: bool = False):
    """The adapter and value-head gradients and statistics of one PPO step over one minibatch of
    five exchanges of different prompt and answer lengths, in micro-batches of ``micro``."""
    cfg = PPOConfig(max_new_tokens=6, minibatch_size=5, micro_batch_size=micro, gradient_checkpointing=checkpointing,
                    actor_max_grad_norm=1e9, critic_max_grad_norm=1e9)
    policy = LMPolicy(*tiny(), cfg)
    with torch.no_grad():  # adapters with weight, so the policy and pi_ref differ
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    policy._merged = None
    buffer = []
    for i, prompt in enumerate(["queue", "queue 3 near 4 near 5", "<signal>", "NTST 1 ETWT", "queue 3"]):
        _, ex = policy.sample(prompt, rng=np.random.default_rng(i))
        ex.answer_ids = ex.answer_ids[: 2 + i % 4]  # answers of different lengths, as if ended early
        ex.reward = float(i) - 2.0
        buffer.append(ex)
    policy.score_pending()
    policy.actor_opt.step = policy.critic_opt.step = lambda: None  # keep the gradients, leave the weights
    stats = {"policy_loss": [], "value_loss": [], "clip_frac": [], "kl": []}
    policy._step(buffer, [policy.advantages(e) for e in buffer], stats)
    grads = [p.grad.clone() for p in [*policy.actor_params, *policy.value_head.parameters()]]
    return grads, stats, buffer


@pytest.mark.parametrize("micro, checkpointing", [(1, False), (2, False), (2, True)])
def test_micro_batches_accumulate_the_gradient_of_the_whole_minibatch(micro, checkpointing):
    """Advantages standardised and token means taken over the whole minibatch: the accumulated
    gradient of its micro-batches is the minibatch's own (float rounding apart)."""
    whole, whole_stats, buffer = _stepped_grads(0)
    assert len({len(e.answer_ids) for e in buffer}) > 1 and len({len(e.prompt_ids) for e in buffer}) > 1
    parts, part_stats, _ = _stepped_grads(micro, checkpointing)
    assert sum(float(g.abs().sum()) for g in whole) > 0
    for g, h in zip(whole, parts, strict=True):
        assert torch.allclose(g, h, rtol=1e-4, atol=1e-7), (g - h).abs().max()
    for key, values in whole_stats.items():
        assert part_stats[key] == pytest.approx(values, rel=1e-4, abs=1e-7)
    with pytest.raises(ValueError, match="micro_batch_size"):
        PPOConfig(micro_batch_size=-1)


def test_generate_reuses_the_shared_prompt_prefix_and_draws_the_same_answers(monkeypatch):
    """The GPU path (``generate`` on the adapter-wrapped model): the prompt's KV cache computed once
    and repeated for the G rows gives the answers of G full pre-fills, with the same seed."""
    from llmtraffic.rl.llm_ppo import policy as policy_module

    policy = LMPolicy(*tiny(), PPOConfig(group_size=4, max_new_tokens=6))
    policy.merge_sampler = False  # as on a GPU or over a 4-bit base
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(3))
    prefills = []
    real = policy_module.shared_prefix_cache
    monkeypatch.setattr(policy_module, "shared_prefix_cache", lambda *a: prefills.append(a[1].shape) or real(*a))
    cached = [policy.sample("queue 3 near 4 near", rng=np.random.default_rng(s), record=False)[0] for s in range(3)]
    assert prefills and all(shape[0] == 1 for shape in prefills)  # one row pre-filled per decision
    monkeypatch.setattr(policy_module, "shared_prefix_cache", lambda *a: None)
    full = [policy.sample("queue 3 near 4 near", rng=np.random.default_rng(s), record=False)[0] for s in range(3)]
    assert cached == full and len({tuple(c) for c in cached}) > 1


def test_checkpoints_answer_in_one_generate_as_mixed_adapters(tmp_path):
    """generate's path (a GPU, a 4-bit base): the checkpoints of a held-out selection loaded side by
    side as adapters, each block of prompts answered by its own, as each answers alone (greedy)."""
    from llmtraffic.rl.llm_ppo.adapters import MixedAdapters

    policy = LMPolicy(*tiny(), PPOConfig(max_new_tokens=5, temperature=0.0))
    policy.merge_sampler = False
    paths = []
    for k in range(3):
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5, generator=torch.Generator().manual_seed(10 + k))
        policy.save(tmp_path / f"c{k}.pt")
        paths.append(tmp_path / f"c{k}.pt")
    prompts = ["queue 3 near", "near 4 queue", "queue 5 near", "near 6 queue", "queue 7 near", "near 8 queue"]
    mixed = policy.checkpoints_decoder(paths)
    assert isinstance(mixed, MixedAdapters) and mixed.models == 3
    rngs = [np.random.default_rng(i) for i in range(6)]
    together = policy.sample_each(prompts, rngs, mixed)
    mixed.close()
    alone = []
    for k, path in enumerate(paths):
        policy.load(path)
        alone += [policy.sample(p, 1, record=False)[0][0] for p in prompts[2 * k : 2 * k + 2]]
    assert together == alone and len(set(alone)) > 1
    assert list(policy.model.peft_config) == ["default"]  # the candidates are gone
