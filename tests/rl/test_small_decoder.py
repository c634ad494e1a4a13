"""The plain-torch decoder computes the model's function and samples like ``generate``."""

import pytest
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from llmtraffic.llm.tiny import TinySpec, build_tiny
from llmtraffic.rl.small_decoder import SmallDecoder, supports, warp

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


def test_greedy_answers_equal_generates_and_finished_rows_are_padded():
    model, tok = tiny()
    ids = tok("Queue on north", return_tensors="pt").input_ids
    stop = [int(t) for t in model(input_ids=ids).logits[0, -1].topk(3).indices[1:]]  # likely tokens as stops
    ref = model.generate(input_ids=ids.repeat(2, 1), max_new_tokens=12, do_sample=False, eos_token_id=stop,
                         pad_token_id=0)[:, ids.shape[1]:]
    ours = SmallDecoder(model).sample(ids[0], 2, 12, stop, pad_id=0, temperature=0)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 0.95, 0), (0.7, 0.8, 0), (1.3, 1.0, 5), (0.6, 0.9, 20)])
def test_sampling_processors_are_generates(temperature, top_p, top_k):
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(3)) * 3
    hf = LogitsProcessorList([TemperatureLogitsWarper(temperature)] + ([TopKLogitsWarper(top_k)] if top_k else [])
                             + ([TopPLogitsWarper(top_p)] if top_p < 1 else []))
    expected = hf(None, logits.clone())
    assert torch.equal(torch.isinf(warp(logits, temperature, top_p, top_k)), torch.isinf(expected))
    assert torch.allclose(warp(logits, temperature, top_p, top_k).softmax(-1), expected.softmax(-1), atol=1e-6)


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
