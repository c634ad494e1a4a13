"""Answers constrained to a list of texts: the trie, masked decoding in both samplers, the exact
distribution, and PPO scoring under the rollout's mask."""

import math

import pytest
import torch

from llmtraffic.llm.tiny import TinySpec, build_tiny
from llmtraffic.rl.constrained import AnswerTrie, TrieLogitsProcessor
from llmtraffic.rl.llm_ppo import LMPolicy, PPOConfig, torch_threads

CORPUS = [f"<signal>{x}</signal> queue {i} near {i + 1}" for x in ("NT", "NTST", "ETWT", "ELWL") for i in range(9)]
CHOICES = ("NT</signal>", "NTST</signal>", "ETWT</signal>", "ELWL</signal>")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with torch_threads(1):
        yield


def tiny(seed: int = 0):
    return build_tiny(CORPUS, TinySpec(hidden=32, intermediate=64, seed=seed))


def ids(tok, text):
    return tok(text, add_special_tokens=False).input_ids


def test_the_trie_branches_where_a_mnemonic_that_is_a_token_prefix_of_another_parts():
    _, tok = tiny()
    assert ids(tok, "NTST")[: len(ids(tok, "NT"))] == ids(tok, "NT")  # NT is a token-prefix of NTST
    trie = AnswerTrie(tok, CHOICES)
    nt, ntst = trie.seqs[0], trie.seqs[1]
    shared = next(j for j in range(min(len(nt), len(ntst))) if nt[j] != ntst[j])
    assert shared >= 1 and set(trie.allowed(nt[:shared])) >= {nt[shared], ntst[shared]}
    for seq in trie.seqs:  # every answer walks the trie, and stops only at its end
        assert all(seq[j] in trie.allowed(seq[:j]) for j in range(len(seq)))
        assert trie.allowed(seq, stop_ids=[7]) == [7]
    with pytest.raises(ValueError, match="token-prefix"):
        AnswerTrie(tok, ("NT", "NTST"))  # no closing text: NT's end is ambiguous


def test_exact_distribution_sums_to_one_and_is_what_masked_decoding_draws_in_both_samplers():
    model, tok = tiny()
    policy = LMPolicy(model, tok, PPOConfig(answer="constrained", max_new_tokens=8))
    trie, prompt = policy.trie(CHOICES), torch.tensor(ids(tok, "queue 3 near 4 <signal>"))
    logp, _ = policy.choose([prompt], trie)
    probs = logp.exp()[0]
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-6) and (probs > 0.01).all()
    # SmallDecoder's loop with the trie's mask: only the choices, in the exact proportions
    n = 3000
    out = policy._sampler().sample(prompt, n, 8, policy.stop_ids, policy.pad_id, 1.0, generator=torch.Generator().manual_seed(0),
                                   constraint=lambda so_far, vocab: trie.mask(so_far.tolist(), vocab, policy.stop_ids))
    texts = [tok.decode(policy._trim(row), skip_special_tokens=True) for row in out]
    assert set(texts) <= set(CHOICES)
    freq = torch.tensor([texts.count(c) / n for c in CHOICES])
    assert ((freq - probs).abs() <= 4 * (probs * (1 - probs) / n).sqrt()).all()
    # Hugging Face generate with the same mask as a LogitsProcessor (the GPU path)
    with torch.no_grad():
        gen = policy.model.generate(input_ids=prompt[None].repeat(64, 1), do_sample=True, max_new_tokens=8,
                              pad_token_id=policy.pad_id, eos_token_id=policy.stop_ids,
                              logits_processor=[TrieLogitsProcessor(trie, len(prompt), policy.stop_ids)])
    assert {tok.decode(policy._trim(row), skip_special_tokens=True) for row in gen[:, len(prompt):]} <= set(CHOICES)
    # the exact distribution through the model's own forward (GPU / 4-bit path) is SmallDecoder's
    policy.merge_sampler = False
    assert torch.allclose(policy.choose([prompt], trie)[0], logp, atol=1e-5)


def test_constrained_samples_name_a_choice_and_the_ppo_ratio_is_one_on_a_fresh_batch():
    model, tok = tiny()
    policy = LMPolicy(model, tok, PPOConfig(answer="constrained", group_size=8, lora_layers=1, minibatch_size=4))
    buffer = []
    for i in range(6):
        texts, ex = policy.sample(f"queue {i} near {i + 1} <signal>", choices=CHOICES)
        assert len(texts) == 8 and set(texts) <= set(CHOICES) and texts[0] == tok.decode(ex.answer_ids)
        assert ex.probs.sum().item() == pytest.approx(1.0, abs=1e-6) and ex.states is not None
        ex.reward = float(i % 2)
        buffer.append(ex)
    policy.score_pending()
    for ex in buffer:  # the update scores each answer under the rollout's mask: log pi_old is the exact log p
        assert ex.old_logp.sum().item() == pytest.approx(math.log(ex.probs[ex.choices.index(ex.texts[0])]), abs=1e-5)
    batch = [e.prompt_ids for e in buffer], [e.answer_ids for e in buffer]
    states = torch.nn.utils.rnn.pad_sequence([e.states for e in buffer], batch_first=True)
    logp, _, mask = policy._evaluate(*batch, *policy._trainer(), states, [policy.trie(CHOICES)] * len(buffer))
    old = torch.nn.utils.rnn.pad_sequence([e.old_logp for e in buffer], batch_first=True)
    assert torch.equal(torch.exp(logp - old)[mask.bool()], torch.ones(int(mask.sum())))
    stats = policy.update(buffer)
    assert stats["clip_frac"] == 0.0
