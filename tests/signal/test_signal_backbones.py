"""Backbones on a real (tiny) transformers checkpoint: no pad token, the backbone's own decoding
settings, Qwen3's thinking switch."""

import math

import pytest
import torch
from transformers import GenerationConfig

from llmtraffic.llm.tiny import CHATML_TEMPLATE, TinySpec, tiny_model, tiny_tokenizer
from llmtraffic.signal.backbones import (THINKING_MIN_NEW_TOKENS, backbone_unavailable, episode_messages, load_backbone,
                                       ppo_config, prompt_tokens, settings_text)
from llmtraffic.signal.oracle_training import chat_prompter
from llmtraffic.signal.state import IntersectionState, LaneCounts, Movement, Phase

pytestmark = pytest.mark.usefixtures("torch_one_thread")

CORPUS = [f"<signal>{x}</signal> queue {i} near {i + 1}" for x in ("ETWT", "NTST") for i in range(9)]

QWEN3_LIKE_TEMPLATE = CHATML_TEMPLATE.replace(
    "<|im_start|>assistant\n{% endif %}",
    "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}")
"""Qwen3's switch in miniature: ``enable_thinking=False`` pre-fills an empty thinking block."""

STATE = IntersectionState(
    time_s=10, phase=0, lanes={"n0": LaneCounts(3, 1, 0, 2), "e0": LaneCounts(0, 0, 1, 0)},
    phases=(Phase(0, "NTST", "north-south through", (Movement("n0", "s1", "N", "through"),)),
            Phase(1, "ETWT", "east-west through", (Movement("e0", "w1", "E", "through"),))))


def _save(tmp_path, pad=True, template=CHATML_TEMPLATE, **generation):
    """A tiny Qwen2-shaped checkpoint folder; ``generation`` fills its generation_config.json."""
    tok = tiny_tokenizer(CORPUS, pad=pad)
    tok.chat_template = template
    model = tiny_model(tok, TinySpec(hidden=32, intermediate=64, seed=0))
    if generation:
        model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, **generation)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return str(tmp_path)


CPU = {"load_in_4bit": False, "max_new_tokens": 6}


def test_a_tokenizer_without_pad_token_runs_a_full_ppo_update(tmp_path):
    path = _save(tmp_path, pad=False)
    assert backbone_unavailable(path) is None  # a local folder runs on the CPU
    policy, _ = load_backbone(path, "cologne1", ppo={**CPU, "group_size": 3, "minibatch_size": 4, "actor_lr": 1e-2})
    assert policy.tokenizer.pad_token_id is None and policy.pad_id == policy.tokenizer.eos_token_id
    buffer = []
    for i, prompt in enumerate(["queue", "queue 3 near 4 near 5", "<signal>", "NTST 1 ETWT"]):  # padded batch
        _, ex = policy.sample(prompt)
        ex.reward = float(i % 2)
        buffer.append(ex)
    before = [p.detach().clone() for p in policy.actor_params]
    stats = policy.update(buffer)
    assert all(math.isfinite(v) for v in stats.values()) and policy.updates == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.actor_params))


def test_decoding_follows_the_backbones_generation_config(tmp_path):
    sampled = _save(tmp_path / "s", do_sample=True, temperature=0.6, top_p=0.95, top_k=20)
    cfg = ppo_config(sampled, "cologne1")
    assert (cfg.temperature, cfg.top_p, cfg.top_k) == (0.6, 0.95, 20)
    assert ppo_config(sampled, "cologne1", temperature=1.0).temperature == 1.0  # an explicit setting wins
    assert ppo_config(_save(tmp_path / "g", do_sample=False), "cologne1").temperature == 0.0
    # top-k = 1 at temperature 1: every one of G sampled answers is the greedy answer
    top1 = _save(tmp_path / "k", do_sample=True, temperature=1.0, top_k=1)
    policy, _ = load_backbone(top1, "cologne1", ppo={**CPU, "group_size": 6})
    answers, _ = policy.sample("queue 3 near")
    greedy, _ = load_backbone(top1, "cologne1", ppo={**CPU, "temperature": 0.0})[0].sample("queue 3 near", group_size=1)
    assert answers == greedy * 6


def test_thinking_mode_is_set_explicitly(tmp_path):
    path = _save(tmp_path, template=QWEN3_LIKE_TEMPLATE)
    _, prompter = load_backbone(path, "cologne1", ppo=CPU)
    assert prompter(STATE, []).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # thinking off
    thinking = load_backbone(path, "cologne1", ppo={**CPU, "thinking": True, "max_new_tokens": THINKING_MIN_NEW_TOKENS})[1]
    assert thinking(STATE, []).endswith("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="max_new_tokens >= 2048"):
        load_backbone(path, "cologne1", ppo={**CPU, "thinking": True, "max_new_tokens": 512})
    plain = tiny_tokenizer(CORPUS)
    with pytest.raises(ValueError, match="no thinking mode"):
        chat_prompter(plain, thinking=True)
    assert "<think>" not in chat_prompter(plain)(STATE, [])


def test_benchmark_prompts_carry_two_past_states_and_are_counted_with_the_tokenizer():
    chats = episode_messages("synthetic", decisions=4)
    users = [c[1]["content"] for c in chats]
    assert len(chats) == 4 and "decision(s) ago" not in users[0]
    assert users[3].index("## State 2 decision(s) ago") < users[3].index("## State 1 decision(s) ago") \
        < users[3].index("## Current state")
    assert "## State 3" not in users[3]  # only the two most recent (§3.1)
    tok = tiny_tokenizer(CORPUS)
    n, how = prompt_tokens(chats[3], tok)
    assert how == "tokenizer" and n == len(tok.apply_chat_template(chats[3], add_generation_prompt=True, return_dict=False))
    assert prompt_tokens([{"role": "user", "content": "abcdefg"}]) == (2, "assumed 3.5 characters per token")
    assert prompt_tokens([{"role": "user", "content": "abcdefgh"}])[0] == 3  # rounded up


def test_registered_gguf_backbones_run_here_in_fp32_with_their_card_names():
    from llmtraffic.signal.backbones import backbone_title

    for name, title in [("smollm2-135m", "SmolLM2-135M-Instruct"), ("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct")]:
        assert backbone_unavailable(name) is None  # installed by make venv (requirements-models.txt)
        assert backbone_title(name) == title
        assert ppo_config(name, "cologne1").load_in_4bit is False
    assert backbone_unavailable("Qwen3-0.6B") is not None or torch.cuda.is_available()


def test_captions_name_the_hurdle_and_clip_a_fine_tune_ran_with():
    assert settings_text("Qwen3-0.6B", "hangzhou1x1", {}, 2.0) == "Qwen3-0.6B: H_R = 3.7, ε_l = 0.2, ε_u = 0.5"  # Table 8
    assert settings_text("surrogate-tiny", "cologne1", {"clip_high": 0.3}, 2.0) == \
        "surrogate-tiny: H_R = 2, ε_l = 0.2, ε_u = 0.3"
