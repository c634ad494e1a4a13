"""The plain-torch decoder computes the model's function and samples like ``generate``."""

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from llmtraffic.llm.tiny import TinySpec, build_tiny
from llmtraffic.rl.small_decoder import SmallDecoder, nucleus, shared_attention, supports

CORPUS = ["Queue on north approach: 12 vehicles. Choose the next phase.", "<signal>2</signal> ETWT NTST"] * 4


def tiny():
    model, tok = build_tiny(CORPUS, TinySpec(hidden=64, intermediate=128, seed=1))
    with torch.no_grad():  # random weights far from the init scale, so that errors show
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    return model.eval(), tok


def test_logits_of_prefill_and_each_cached_step_equal_the_models():
    model, tok = tiny()
    decoder = SmallDecoder(model)
    ids = tok("Queue on north approach: 12", return_tensors="pt").input_ids
    more = torch.tensor([[5, 9, 17, 30]])
    with torch.no_grad():
        full = model(input_ids=torch.cat([ids, more], 1)).logits[0]
        logits, cache = decoder.forward(ids)
        assert torch.allclose(logits[0], full[ids.shape[1] - 1], atol=1e-5)
        for j in range(more.shape[1]):
            logits, cache = decoder.forward(more[:, j : j + 1], cache)
            assert torch.allclose(logits[0], full[ids.shape[1] + j], atol=1e-5)
        assert not torch.allclose(logits[0], full[ids.shape[1] - 1], atol=1e-3)  # positions matter


def test_shared_attention_equals_attention_over_each_rows_own_copy_of_its_prompt():
    g = torch.Generator().manual_seed(0)
    prompts, n, kv_heads, group, length, steps, dim = 2, 3, 2, 3, 5, 4, 8
    rows, heads = prompts * n, kv_heads * group
    q = torch.randn(rows, heads, 1, dim, generator=g)
    keys, values = (torch.randn(prompts, kv_heads, length, dim, generator=g) for _ in range(2))
    own_keys, own_values = (torch.randn(rows, kv_heads, steps, dim, generator=g) for _ in range(2))
    valid = torch.ones(prompts, length, dtype=torch.bool)
    valid[1, :2] = False  # prompt 1 is left-padded by 2
    padding = torch.zeros(prompts, length).masked_fill(~valid, float("-inf"))
    out = shared_attention(q, keys, values, padding, own_keys, own_values)
    # reference: every row with its own copy of its prompt's keys, padding masked out
    k = torch.cat((keys.repeat_interleave(n, 0), own_keys), 2)
    v = torch.cat((values.repeat_interleave(n, 0), own_values), 2)
    mask = torch.cat((valid.repeat_interleave(n, 0), torch.ones(rows, steps, dtype=torch.bool)), 1)[:, None, None]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert torch.allclose(out, expected, atol=1e-6)
    # a row of prompt 1 ignores the padded keys: changing them changes nothing
    keys[1, :, :2] += 100.0
    assert torch.allclose(shared_attention(q, keys, values, padding, own_keys, own_values), out, atol=1e-6)
    keys[0, :, :1] += 1.0  # prompt 0's keys are read by its rows only
    moved = shared_attention(q, keys, values, padding, own_keys, own_values)
    assert not torch.allclose(moved[:n], out[:n], atol=1e-4) and torch.allclose(moved[n:], out[n:], atol=1e-6)


def test_greedy_answers_equal_generates_and_finished_rows_are_padded():
    model, tok = tiny()
    ids = tok("Queue on north", return_tensors="pt").input_ids
    stop = [int(t) for t in model(input_ids=ids).logits[0, -1].topk(3).indices[1:]]  # likely tokens as stops
    ref = model.generate(input_ids=ids.repeat(2, 1), max_new_tokens=12, do_sample=False, eos_token_id=stop,
                         pad_token_id=0)[:, ids.shape[1]:]
    ours = SmallDecoder(model).sample(ids[0], 2, 12, stop, pad_id=0, temperature=0)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 0.95, 0), (0.7, 0.8, 0), (1.3, 1.0, 5), (0.6, 0.9, 20)])
@pytest.mark.parametrize("spread", [3.0, 0.1])  # 0.1: flat rows whose top-p mass lies beyond the candidates
def test_sampling_processors_are_generates(temperature, top_p, top_k, spread):
    logits = torch.randn(6, 100, generator=torch.Generator().manual_seed(3)) * spread
    hf = LogitsProcessorList([TemperatureLogitsWarper(temperature)] + ([TopKLogitsWarper(top_k)] if top_k else [])
                             + ([TopPLogitsWarper(top_p)] if top_p < 1 else []))
    expected = hf(None, logits.clone())
    probs, order = nucleus(logits, temperature, top_p, top_k)
    assert torch.all(probs[:, :-1] >= probs[:, 1:])  # in decreasing order
    ours = torch.zeros_like(logits).scatter(-1, order, probs)  # back to token order
    assert torch.equal(ours == 0, torch.isinf(expected))
    assert torch.allclose(ours / ours.sum(-1, keepdim=True), expected.softmax(-1), atol=1e-6)


def test_sampling_is_seeded_by_the_generator_and_draws_the_models_distribution():
    model, tok = tiny()
    decoder = SmallDecoder(model)
    ids = tok("Queue", return_tensors="pt").input_ids[0]
    draw = lambda seed: decoder.sample(ids, 4000, 1, [0], 0, generator=torch.Generator().manual_seed(seed))[:, 0]  # noqa: E731
    assert torch.equal(draw(1), draw(1)) and not torch.equal(draw(1), draw(2))
    with torch.no_grad():
        probs = model(input_ids=ids[None]).logits[0, -1].softmax(-1)
    freq = torch.bincount(draw(5), minlength=probs.numel()).float() / 4000
    assert (freq - probs).abs().max() < 0.03  # 4000 draws: 3 standard errors of the largest p


def test_it_refuses_models_it_cannot_run():
    model, _ = tiny()
    assert supports(model)
    with pytest.raises(ValueError, match="float32 Qwen2"):
        SmallDecoder(model.to(torch.float64))


def test_answers_to_prompts_of_different_lengths_in_one_batch_are_each_rows_own():
    """Left-padded rows: each answer is the one its prompt gets alone, from its own generator."""
    model, tok = tiny()
    decoder = SmallDecoder(model)
    prompts = [tok(t, return_tensors="pt").input_ids[0] for t in ("Queue", "Queue on north approach: 12", "ETWT NTST")]
    assert len({len(p) for p in prompts}) == 3
    gens = lambda: [torch.Generator().manual_seed(s) for s in (4, 5, 6)]  # noqa: E731
    together = decoder.sample_each(prompts, 10, [0], 0, temperature=1.0, generators=gens())
    for r, (p, g) in enumerate(zip(prompts, gens())):
        alone = decoder.sample(p, 1, 10, [0], 0, temperature=1.0, generator=g)[0]
        assert torch.equal(together[r, : len(alone)], alone)
        assert (together[r, len(alone):] == 0).all()  # padded after its stop (or not longer)
    # greedy: the batched logits are the model's, so argmax answers match generate's per prompt
    greedy = decoder.sample_each(prompts, 6, [0], 0, temperature=0)
    for r, p in enumerate(prompts):
        ref = model.generate(input_ids=p[None], max_new_tokens=6, do_sample=False, eos_token_id=[0], pad_token_id=0)
        ref = ref[0, len(p):]
        assert torch.equal(greedy[r, : len(ref)], ref)


def test_models_side_by_side_each_answer_their_own_block_of_prompts():
    model, tok = tiny()
    other = copy.deepcopy(model)
    with torch.no_grad():  # another "adapter": only the linear layers differ
        for name, p in other.named_parameters():
            if name.endswith("proj.weight"):
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(9)) * 0.2)
    prompts = [tok(t, return_tensors="pt").input_ids[0] for t in ("Queue on north", "ETWT", "Queue", "NTST 12")]
    gens = lambda: [torch.Generator().manual_seed(s) for s in (1, 2, 3, 4)]  # noqa: E731
    both = SmallDecoder(model, other).sample_each(prompts, 8, [0], 0, generators=gens())
    for r, (decoder, p, g) in enumerate(zip([SmallDecoder(model)] * 2 + [SmallDecoder(other)] * 2, prompts, gens())):
        alone = decoder.sample(p, 1, 8, [0], 0, generator=g)[0]
        assert torch.equal(both[r, : len(alone)], alone)
    assert not torch.equal(SmallDecoder(model, other).sample_each(prompts[:1] * 2, 8, [0], 0, temperature=0)[0],
                           SmallDecoder(model, other).sample_each(prompts[:1] * 2, 8, [0], 0, temperature=0)[1])
    with pytest.raises(ValueError, match="equal blocks"):
        SmallDecoder(model, other).sample_each(prompts[:3], 8, [0], 0)
    other.model.norm.weight.data.mul_(2)
    with pytest.raises(ValueError, match="outside their linear layers"):
        SmallDecoder(model, other)


def test_stacked_decoders_answer_n_times_per_prompt_as_each_alone():
    """Policies sampled together (lockstep training): decoder i's prompt, pre-filled once, gets
    the n answers ``sample`` gives it alone with generator i."""
    model, tok = tiny()
    other = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in other.named_parameters():
            if name.endswith("proj.weight"):
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(9)) * 0.2)
    alone = [SmallDecoder(model), SmallDecoder(other), SmallDecoder(model, other)]
    stacked = SmallDecoder.stack(alone)
    assert stacked.models == 4
    prompts = [tok(t, return_tensors="pt").input_ids[0] for t in ("Queue on north", "ETWT", "Queue", "NTST 12")]
    gens = lambda: [torch.Generator().manual_seed(s) for s in (1, 2, 3, 4)]  # noqa: E731
    together = stacked.sample_each(prompts, 8, [0], 0, generators=gens(), n=5)
    assert together.shape[0] == 20
    for r, (decoder, p, g) in enumerate(zip([alone[0], alone[1], alone[0], alone[1]], prompts, gens())):
        own = decoder.sample(p, 5, 8, [0], 0, generator=g)
        assert torch.equal(together[5 * r : 5 * r + 5, : own.shape[1]], own)
    assert len({tuple(row.tolist()) for row in together[:5]}) > 1  # n draws, not one draw copied
    changed = copy.deepcopy(other)
    changed.model.norm.weight.data.mul_(2)
    with pytest.raises(ValueError, match="outside their linear layers"):
        SmallDecoder.stack([alone[0], SmallDecoder(changed)])
    with pytest.raises(ValueError, match="2 generators for 4 prompts"):
        stacked.sample_each(prompts, 8, [0], 0, generators=gens()[:2])


def test_the_shared_prefix_is_prefilled_once_and_never_reused_after_the_weights_change():
    model, tok = tiny()
    decoder = SmallDecoder(model)
    computed = []
    trunk = decoder._trunk
    decoder._trunk = lambda ids, *a, **k: (computed.append(tuple(ids.shape)), trunk(ids, *a, **k))[1]
    system = tok("Queue on north approach: 12 vehicles. Choose the next phase.", return_tensors="pt").input_ids[0]
    states = [torch.cat([system, torch.tensor(x)]) for x in ([5, 9, 17], [5, 30, 2, 8], [40, 3])]
    fresh = lambda: SmallDecoder(model)  # noqa: E731
    for state in states:
        ours = decoder.sample(state, 3, 6, [0], 0, temperature=0)
        assert torch.equal(ours, fresh().sample(state, 3, 6, [0], 0, temperature=0))
    prefills = [length for rows, length in computed if rows == 1]  # decoding steps forward 3 rows
    assert prefills[:2] == [len(states[0]) - 1, 1]  # the prompt less its last token, then that token
    assert prefills[2:4] == [len(states[1]) - 1 - (len(system) + 1), 1]  # only what differs from the kept prefix
    # the adapted decoder (new weights) computes the whole prompt again
    del decoder._trunk
    assert decoder._kept is not None
    delta = [{"o": torch.randn(layer["o"][0].shape, generator=torch.Generator().manual_seed(2)) * 0.3}
             for layer in decoder.layers]
    adapted = decoder.adapted(delta)
    assert adapted._kept is None
    merged = copy.deepcopy(model)
    with torch.no_grad():
        for layer, d in zip(merged.model.layers, delta):
            layer.self_attn.o_proj.weight.add_(d["o"])
    assert torch.equal(adapted.sample(states[2], 2, 6, [0], 0, temperature=0),
                       SmallDecoder(merged).sample(states[2], 2, 6, [0], 0, temperature=0))


def test_an_answer_stops_where_its_stop_text_ends():
    model, tok = tiny()
    ids = tok("Queue on north", return_tensors="pt").input_ids[0]
    free = SmallDecoder(model).sample(ids, 2, 8, [-1], 0, temperature=0)
    end = int(free[0, 2])  # stop once the third token is sampled
    stopped = SmallDecoder(model).sample(ids, 2, 8, [-1], 0, temperature=0,
                                         stop=lambda out: out[:, -1] == end if out.shape[1] == 3 else torch.zeros(len(out), dtype=torch.bool))
    assert stopped.shape[1] == 3 and torch.equal(stopped, free[:, :3])
