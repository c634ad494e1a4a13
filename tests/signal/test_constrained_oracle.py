"""OracleTSC with answers constrained to the phases: the exact softmax DSE, the training loop's
records, and one PPO update on SmolLM2 under the answers' mask."""

import math

import numpy as np
import pytest
import torch

from llmtraffic.rl.llm_ppo import LMPolicy, torch_threads
from llmtraffic.signal.oracle import RewardConfig, exact_dse, softmax_dse
from llmtraffic.signal.oracle_training import OracleConfig, train
from llmtraffic.signal.prompt import parse_phase
from llmtraffic.signal.surrogate import SurrogateConfig, compact_prompt, load_surrogate, surrogate_ppo_config, train_surrogate


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with torch_threads(1):
        yield


@pytest.mark.parametrize("tau", [0.0, 2.0])
def test_exact_dse_is_the_limit_of_the_g_sample_estimate(tau):
    """Eq. 11 from the expected counts G·p is what the estimate from G' answers tends to as G'
    grows with τ/G fixed: seeded estimates of G' = 20,000 answers fall within their sampling error."""
    p, g, chosen, big = np.array([0.45, 0.3, 0.15, 0.1]), 8, 0, 20_000
    exact = exact_dse(p, chosen, tau, g)
    rng = np.random.default_rng(0)
    estimates = [softmax_dse(rng.multinomial(big, p) * g / big, chosen, tau) for _ in range(30)]
    error = max(np.std(estimates) / math.sqrt(len(estimates)), 1e-12)
    assert abs(np.mean(estimates) - exact) <= 4 * error + 1e-9
    assert exact == (1.0 if tau == 0 else pytest.approx(np.exp(g * p / tau)[0] / np.exp(g * p / tau).sum()))
    # and G = 8 answers alone are a noisy estimate of it
    small = [softmax_dse(rng.multinomial(g, p), chosen, tau) for _ in range(200)]
    assert np.std(small) > 0.1


def test_a_constrained_training_episode_names_a_phase_every_time_and_records_both_dses(tmp_path):
    model, tok = load_surrogate(train_surrogate(SurrogateConfig(collect_seeds=(1000,), episode_s=300, steps=0, hidden=32)))
    policy = LMPolicy(model, tok, surrogate_ppo_config(group_size=4, answer="constrained"))
    reward = RewardConfig(entropy="softmax", tau=0.0, exact=True)
    out = train(policy, lambda s, h: compact_prompt(s), OracleConfig(scenario="synthetic", episodes=1, episode_s=360,
                                                                   reward=reward), tmp_path)
    episode = out["episodes"][0]
    assert episode["invalid_rate"] == 0.0 and len(episode["dse"]) == 36 and episode["updates"] == 1
    assert all(0 <= a <= 1 and 0 <= b <= 1 for a, b in episode["dse"])
    assert 0 <= episode["update_stats"][0]["phase_entropy"] <= 1


def test_one_constrained_ppo_update_on_smollm2_lowers_the_clipped_loss_and_changes_only_lora(smollm2):
    from llmtraffic.rl.llm_ppo import clipped_surrogate_loss, standardize
    from llmtraffic.signal.backbones import load_backbone
    from llmtraffic.signal.state import Phase

    policy, _ = load_backbone("smollm2-135m", "hangzhou1x1", ppo={
        "prompt": "brief", "prompt_history": 0, "group_size": 4, "answer": "constrained", "lora_layers": 2,
        "lora_rank": 4, "minibatch_size": 4, "actor_lr": 2e-4, "kl_beta": 0.0})
    tok = policy.tokenizer
    phases = [Phase(i, m, m, ()) for i, m in enumerate(("NT", "NTST", "ETWT", "ELWL"))]  # NT: a prefix of NTST
    choices = tuple(p.mnemonic + "</signal>" for p in phases)
    system = [{"role": "system", "content": "You control a traffic signal. Answer with one phase: NT, NTST, ETWT or ELWL."}]
    buffer = []
    for i, q in enumerate(["Queues: NTST 7, ETWT 12.", "Queues: NTST 0, ETWT 3.", "Queues: NT 9, ELWL 1.", "Queues: NT 4."]):
        prompt = tok.apply_chat_template([*system, {"role": "user", "content": q}], tokenize=False,
                                         add_generation_prompt=True) + "<signal>"
        texts, ex = policy.sample(prompt, choices=choices)
        assert all(parse_phase(t, phases) is not None for t in texts)
        assert ex.probs.sum().item() == pytest.approx(1.0, abs=1e-5)
        ex.reward = (-1.0) ** i
        buffer.append(ex)
    policy.score_pending()
    tries = [policy.trie(choices)] * len(buffer)
    batch = ([e.prompt_ids for e in buffer], [e.answer_ids for e in buffer])
    states = torch.nn.utils.rnn.pad_sequence([e.states for e in buffer], batch_first=True)
    logp, _, mask = policy._evaluate(*batch, *policy._trainer(), states, tries)
    old = torch.nn.utils.rnn.pad_sequence([e.old_logp for e in buffer], batch_first=True)
    assert torch.equal(torch.exp(logp - old)[mask.bool()], torch.ones(int(mask.sum())))
    adv = standardize(torch.nn.utils.rnn.pad_sequence([policy.advantages(e)[0] for e in buffer], batch_first=True), mask)
    before = clipped_surrogate_loss(logp, old, adv, policy.cfg.clip_low, policy.cfg.clip_high, mask).item()
    params = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    policy.update(buffer)
    changed = {n for n, p in policy.model.named_parameters() if not torch.equal(p, params[n])}
    assert changed and all("lora_" in n for n in changed)
    with torch.no_grad():
        after_logp, _, _ = policy._evaluate(*batch, *policy._trainer(), states, tries)
    after = clipped_surrogate_loss(after_logp, old, adv, policy.cfg.clip_low, policy.cfg.clip_high, mask).item()
    assert after < before


def test_the_hurdle_is_calibrated_at_the_70th_percentile_of_zero_shot_r_env():
    from llmtraffic.signal.oracle import calibrate_hurdle

    assert calibrate_hurdle(range(11)) == pytest.approx(7.0)  # 70 % of the eleven decisions cut the queue by < 7
    assert calibrate_hurdle([-2, 0, 0, 1, 5], 0.5) == 0.0
    with pytest.raises(ValueError, match="no R_env"):
        calibrate_hurdle([])
