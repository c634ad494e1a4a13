"""The surrogate-tiny stand-in: compact prompt, noisy heuristic, supervised start, round trip."""

import pickle

import numpy as np
import pytest
import torch

from llmtraffic.rl.llm_ppo import torch_threads
from llmtraffic.signal.prompt import parse_phase
from llmtraffic.signal.state import IntersectionState, LaneCounts, Movement, Phase
from llmtraffic.signal.surrogate import (
    LABEL,
    SURFACE_FORMS,
    SurrogateConfig,
    answer_text,
    check_forms,
    compact_prompt,
    load_surrogate,
    max_queue_phase,
    noisy_heuristic,
    phase_queue,
    surrogate_ppo_config,
    train_surrogate,
)

PHASES = (
    Phase(0, "NS", "north-south", (Movement("n", "s_out", "N", "through"), Movement("s", "n_out", "S", "through"),
                                   Movement("s", "e_out", "S", "right"))),
    Phase(1, "EW", "east-west", (Movement("e", "w_out", "E", "through"), Movement("w", "e_out", "W", "through"))),
)
PHASES_COLOGNE = tuple(Phase(i, m, d) for i, (m, d) in enumerate([
    ("NUTRLSUTRL", "Northern and southern U-turn, through, right-turn and left-turn lanes"),
    ("NULSUL", "Northern and southern U-turn and left-turn lanes"),
    ("EUTRLWUTRL", "Eastern and western U-turn, through, right-turn and left-turn lanes"),
    ("EULWUL", "Eastern and western U-turn and left-turn lanes")]))
"""Cologne1's phase names as the environment derives them (only names matter for parsing)."""
STATE = IntersectionState(
    30.0, 1,
    {"n": LaneCounts(2, 1, 0, 3), "s": LaneCounts(4, 0, 1, 0), "e": LaneCounts(5, 0, 0, 0), "w": LaneCounts(0, 2, 2, 2)},
    PHASES,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with torch_threads(1):
        yield


def test_compact_prompt_sums_each_lane_once():
    assert compact_prompt(STATE) == "now EW ; NS q6 n1 m1 f3 ; EW q5 n2 m2 f2 =>"
    assert phase_queue(STATE, PHASES[0]) == 6  # lane s serves two movements, counted once
    assert max_queue_phase(STATE) == 0


def test_noisy_heuristic_mixes_max_queue_and_uniform():
    rng = np.random.default_rng(0)
    always = {noisy_heuristic(STATE, 1.0, rng) for _ in range(50)}
    assert always == {0}
    picks = np.array([noisy_heuristic(STATE, 0.4, rng) for _ in range(4000)])
    # P(max-queue phase) = 0.4 + 0.6 / 2 = 0.7
    assert (picks == 0).mean() == pytest.approx(0.7, abs=0.03)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="p_heuristic"):
        SurrogateConfig(p_heuristic=1.5)
    with pytest.raises(ValueError, match="collect_seeds"):
        SurrogateConfig(collect_seeds=())


def test_surface_forms_parse_back_and_overlapping_names_are_rejected():
    texts = {form: answer_text(PHASES[0], form) for form in SURFACE_FORMS}
    assert texts == {"tag": "<signal> NS</signal>", "tag_lower": "<signal>ns</signal>", "sentence": "Serve north-south."}
    assert all(parse_phase(t, PHASES) == 0 for t in texts.values())
    clash = (PHASES[0], Phase(1, "EW", "east-west, not north-south", PHASES[1].movements))  # ends with phase 0's name
    with pytest.raises(ValueError, match="names overlap"):
        check_forms(clash, ("sentence",))
    with pytest.raises(ValueError, match="surface_forms"):
        SurrogateConfig(surface_forms=("tag", "poem"))


def test_short_supervised_start_answers_in_several_surface_forms_and_round_trips():
    cfg = SurrogateConfig(scenario="cologne1", collect_seeds=(1000,), episode_s=600, steps=300, hidden=64)
    artifact = pickle.loads(pickle.dumps(train_surrogate(cfg)))
    assert artifact.label == LABEL == "surrogate-tiny"
    model, tok = load_surrogate(artifact)
    again, _ = load_surrogate(artifact)
    prompt = "now NULSUL ; NUTRLSUTRL q3 n0 m1 f0 ; NULSUL q0 n0 m0 f0 ; EUTRLWUTRL q7 n1 m0 f2 ; EULWUL q1 n0 m0 f0 =>"
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, again(input_ids=ids).logits)
        torch.manual_seed(0)
        out = model.generate(input_ids=ids.repeat(24, 1), max_new_tokens=32, do_sample=True, top_p=0.95,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    texts = [tok.decode(row[ids.shape[1]:], skip_special_tokens=True) for row in out]
    phases = [parse_phase(t, PHASES_COLOGNE) for t in texts]
    assert sum(p is not None for p in phases) >= 22  # the format is learnt
    by_phase = {}
    for text, phase in zip(texts, phases):
        by_phase.setdefault(phase, set()).add(text)
    assert max(len(v) for k, v in by_phase.items() if k is not None) >= 2  # one phase, several texts
    lengths = {len(tok(t, add_special_tokens=False).input_ids) for t in texts}
    assert max(lengths) > 3  # multi-token forms


def test_surrogate_ppo_config_overrides():
    cfg = surrogate_ppo_config(actor_lr=1e-4)
    assert (cfg.actor_lr, cfg.top_p, cfg.max_new_tokens) == (1e-4, 0.95, 32)
