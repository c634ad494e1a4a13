"""The `hf` backend on a tiny Qwen2-shaped model with a tokenizer trained in the test."""

import pytest
import torch

from llmtraffic import llm
from llmtraffic.llm.tiny import TinySpec, build_tiny

TEACH = {
    "Bus 3 is bunched. Hold?": "hold 30",
    "Bus 5 has a long gap. Hold?": "release",
}


def chat(question):
    return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}]


def fit(model, tokenizer, steps=150):
    """Teach the answers in TEACH (loss on answer tokens and the end token only)."""
    rows = []
    for question, answer in TEACH.items():
        prompt = tokenizer.apply_chat_template(chat(question), add_generation_prompt=True, return_dict=False)
        target = tokenizer(answer)["input_ids"] + [tokenizer.eos_token_id]
        rows.append((torch.tensor([prompt + target]), len(prompt)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        for ids, start in rows:
            labels = ids.clone()
            labels[:, :start] = -100
            loss = model(input_ids=ids, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    """Directory of a tiny model that learnt TEACH, saved as a transformers checkpoint."""
    corpus = list(TEACH) + list(TEACH.values()) + ["system user assistant Answer briefly."]
    # hidden 64, not 32: NF4 moved a hidden-32 model's logits by up to 5.7 against a margin of 7.8 and flipped an
    # answer with torch's AVX2 kernels (by 0.13 at hidden 64, against margins of 7 or more, with AVX2 or AVX-512)
    model, tokenizer = build_tiny(corpus, TinySpec(hidden=64, layers=2, seed=0))
    fit(model, tokenizer)
    path = tmp_path_factory.mktemp("tiny") / "tiny-qwen2"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, tokenizer


def test_greedy_answers_follow_the_chat_template_and_stop_at_the_end_token(taught):
    path, tokenizer = taught
    model = llm.from_config({"backend": "hf", "path": str(path)})
    assert model.backend.model == "tiny-qwen2"
    for question, answer in TEACH.items():
        assert model.complete(chat(question), n=2, temperature=0, max_tokens=20) == [answer, answer]
    # tokens of the last request: the prompt once, the answer and its end token for both rows
    prompt = tokenizer.apply_chat_template(chat(question), add_generation_prompt=True, return_dict=False)
    answer_tokens = len(tokenizer(answer)["input_ids"]) + 1
    assert model.usage().calls == 2
    last = llm.from_config({"backend": "hf", "path": str(path)})
    last.complete(chat(question), n=2, temperature=0, max_tokens=20)
    assert (last.usage().prompt_tokens, last.usage().completion_tokens) == (len(prompt), 2 * answer_tokens)


def test_sampling_is_batched_and_a_function_of_the_seed(taught):
    path, _ = taught
    model = llm.from_config({"backend": "hf", "path": str(path)})
    question = chat("A question it never saw")
    first = model.complete(question, n=4, temperature=1.5, max_tokens=12, seed=5)
    assert len(first) == 4 and len(set(first)) > 1  # n rows sampled independently
    assert model.complete(question, n=4, temperature=1.5, max_tokens=12, seed=5) == first
    assert model.complete(question, n=4, temperature=1.5, max_tokens=12, seed=6) != first
    assert model.usage().completion_tokens <= 3 * 4 * 12  # max_tokens bounds every row
    # without a per-request seed the backend's seeded generator advances: new samples on each
    # call, and the same sequence of samples for every backend built with the same seed
    def two_calls():
        model = llm.from_config({"backend": "hf", "path": str(path), "seed": 1})
        return [model.complete(question, n=4, temperature=1.5, max_tokens=8) for _ in range(2)]

    first_run = two_calls()
    assert first_run[0] != first_run[1]
    assert two_calls() == first_run


def test_nf4_quantised_model_loads_as_4bit_and_keeps_the_taught_answers(taught):
    import bitsandbytes as bnb

    path, _ = taught
    model = llm.from_config({"backend": "hf", "path": str(path), "quantization": "nf4"})
    layers = [m for m in model.backend.lm.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == 2 * 7  # q, k, v, o, gate, up, down per decoder layer
    assert all(layer.weight.quant_type == "nf4" for layer in layers)
    for question, answer in TEACH.items():
        # 4-bit rounding of a tiny model may move the end token; the content must stay
        [quantised] = model.complete(chat(question), temperature=0, max_tokens=20)
        assert quantised.startswith(answer)


def test_record_then_replay_of_the_hf_backend_is_identical(taught, tmp_path):
    path, _ = taught
    cache = {"path": str(tmp_path / "hf.jsonl")}
    live = llm.from_config({"backend": "hf", "path": str(path), "cache": cache | {"mode": "record"}})
    answers = [live.complete(chat(q), n=3, temperature=1.0, max_tokens=10) for q in TEACH]
    replay = llm.from_config({"backend": "replay", "cassette": cache["path"]})
    assert [replay.complete(chat(q), n=3, temperature=1.0, max_tokens=10) for q in TEACH] == answers
    assert replay.usage().total_tokens == live.usage().total_tokens


@pytest.mark.parametrize(
    ("cfg", "error", "message"),
    [
        ({"path": "/no/such/model"}, FileNotFoundError, "model directory /no/such/model"),
        ({"path": ".", "quantization": "int3"}, ValueError, "quantization must be null or 'nf4'"),
        ({"model": "x"}, ValueError, r"missing keys \['path'\]"),
    ],
)
def test_bad_hf_config_names_the_field(cfg, error, message):
    with pytest.raises(error, match=message):
        llm.from_config({"backend": "hf"} | cfg)
