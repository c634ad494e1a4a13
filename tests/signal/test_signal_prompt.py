"""OracleTSC prompt (A.4–A.5) and Algorithm 2 on hand-built Hangzhou-like phases (Table 9)."""

import pytest

from llmtraffic.signal.prompt import extract_phase, lane_groups, messages, phase_text, system_prompt, user_prompt
from llmtraffic.signal.state import IntersectionState, LaneCounts, Movement, Phase

TABLE9 = [
    ("ETWT", "Eastern and western through lanes", [("E", "through"), ("W", "through")]),
    ("NTST", "Northern and southern through lanes", [("N", "through"), ("S", "through")]),
    ("ELWL", "Eastern and western left-turn lanes", [("E", "left"), ("W", "left")]),
    ("NLSL", "Northern and southern left-turn lanes", [("N", "left"), ("S", "left")]),
    ("WTWL", "Western through and left-turn lanes", [("W", "through"), ("W", "left")]),
    ("ETEL", "Eastern through and left-turn lanes", [("E", "through"), ("E", "left")]),
    ("STSL", "Southern through and left-turn lanes", [("S", "through"), ("S", "left")]),
    ("NTNL", "Northern through and left-turn lanes", [("N", "through"), ("N", "left")]),
]
PHASES = tuple(
    Phase(i, m, d, tuple(Movement(f"{a}_{t}", "out", a, t) for a, t in moves))
    for i, (m, d, moves) in enumerate(TABLE9)
)
LANES = {f"{a}_{t}": LaneCounts(q, n, m, f) for (a, t), (q, n, m, f) in zip(
    [(a, t) for a in "NESW" for t in ("through", "left")],
    [(1, 0, 2, 3), (4, 1, 0, 0), (17, 1, 5, 17), (2, 0, 0, 1), (6, 2, 2, 2), (0, 0, 1, 0), (3, 2, 7, 20), (5, 0, 0, 0)],
)}
STATE = IntersectionState(time_s=120.0, phase=1, lanes=LANES, phases=PHASES)


def test_phase_text_matches_listing_4_layout_and_counts():
    assert phase_text(PHASES[0], STATE) == (
        "Phase: ETWT (Eastern and western through lanes)\n"
        "**Early Queued Vehicles**:\n"
        "- Eastern through: 17\n"
        "- Western through: 3\n"
        "**Approaching Vehicles**:\n"
        "- Segment 1: Eastern through: 1, Western through: 2\n"
        "- Segment 2: Eastern through: 5, Western through: 7\n"
        "- Segment 3: Eastern through: 17, Western through: 20"
    )


def test_lane_serving_two_turns_is_counted_once():
    shared = Phase(0, "EA", "East all", (Movement("e0", "o1", "E", "through"), Movement("e0", "o2", "E", "right")))
    assert lane_groups(shared) == {"Eastern through/right-turn": ("e0",)}
    state = IntersectionState(0.0, 0, {"e0": LaneCounts(4, 1, 1, 1)}, (shared,))
    assert "- Eastern through/right-turn: 4" in phase_text(shared, state)


def test_system_prompt_describes_the_intersection_of_a4():
    text = system_prompt(PHASES)
    assert ("a four-section intersection with northern, southern, eastern, and western sections, "
            "each containing two lane groups: one for through traffic and one for left-turn traffic") in text
    assert "The traffic light has 8 signal phases." in text
    assert "<signal>YOUR_CHOICE</signal>" in text


def test_system_prompt_describes_unequal_approaches_lane_by_lane():
    phases = (
        Phase(0, "NT", "north", (Movement("n1", "o", "N", "through"), Movement("n2", "o", "N", "left"))),
        Phase(1, "ET", "east", (Movement("e1", "o", "E", "through"),)),
        Phase(2, "EU", "east u-turn", (Movement("e1", "o", "E", "uturn"),)),  # same lane, another phase
    )
    assert ("a two-section intersection with northern and eastern sections, the northern one with "
            "through and left-turn lanes; the eastern one with U-turn/through lanes.") in system_prompt(phases)


def test_user_prompt_keeps_only_two_most_recent_exchanges_with_their_actions():
    past = [(IntersectionState(float(t), 0, LANES, PHASES), a) for t, a in [(90, 3), (100, 0), (110, 2)]]
    text = user_prompt(STATE, past)
    assert "t = 90 s" not in text
    assert text.index("t = 100 s") < text.index("<signal>ETWT</signal>") < text.index("t = 110 s")
    assert "Chosen signal: <signal>ELWL</signal>" in text
    current = text[text.index("## Current state (t = 120 s)"):]
    assert current.startswith("## Current state (t = 120 s)\nCurrent phase: NTST\n\nPhase: ETWT")
    assert current.endswith("- Segment 3: Northern through: 3, Northern left-turn: 0")
    assert [m["role"] for m in messages(STATE, past)] == ["system", "user"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<signal>NTST</signal>", 1),
        ("Step 1: ... Step 2: <signal>ETWT</signal> no wait <signal>NLSL</signal>", 3),  # last tag wins
        ("<signal>NLSL</signal> then <signal>XXXX</signal>", 3),  # last *valid* tag
        ("<signal>maybe</signal> I pick Western through and left-turn lanes", 4),  # invalid tag → description
        ("<SIGNAL> etel </Signal>", 5),  # tag and content case, whitespace
        ("first etwt, finally stsl.", 6),  # no tag: last lowercase mnemonic
        ("Choose NTNL… ou plutôt «ELWL» — 信号", 2),  # unicode around a mnemonic
        ("İİİ ETWT then NTST", 1),  # lower() changes length of İ; positions stay consistent
        ("<signal>ETWT", 0),  # unclosed tag → mention of ETWT
        ("I cannot decide.", 7),  # nothing → default
        ("", 7),
        ("   \n\t", 7),
        (None, 7),
        (b"<signal>NTST</signal>", 7),  # not text → default, no exception
        (42, 7),
    ],
)
def test_extract_phase_algorithm_2(text, expected):
    assert extract_phase(text, PHASES, default=7) == expected


def test_extract_phase_description_beats_mnemonic_it_contains_at_same_position():
    phases = (Phase(0, "EAST", "east only"), Phase(1, "X", "EAST and west"))
    assert extract_phase("go EAST and west", phases) == 1
    assert extract_phase("go east and west, then EAST", phases) == 0


def test_extract_phase_rejects_bad_configuration():
    with pytest.raises(ValueError, match="phases is empty"):
        extract_phase("x", [])
    with pytest.raises(ValueError, match="default 9"):
        extract_phase("x", PHASES, default=9)


def test_the_brief_style_lists_summed_counts_per_phase_and_opens_the_answer_tag():
    from llmtraffic.llm.tiny import CHATML_TEMPLATE, tiny_tokenizer
    from llmtraffic.signal.oracle_training import chat_prompter
    from llmtraffic.signal.prompt import brief_state_text

    text = brief_state_text(STATE)
    # ETWT = E_through (17, 1, 5, 17) + W_through (3, 2, 7, 20); NTNL = N_through + N_left
    assert text.splitlines()[:2] == ["Current phase: NTST", "ETWT: 20 queued; approaching 3, 12, 37"]
    assert text.splitlines()[-1] == "NTNL: 5 queued; approaching 1, 2, 3"
    tok = tiny_tokenizer(["<signal>ETWT</signal>"])
    tok.chat_template = CHATML_TEMPLATE
    past = IntersectionState(time_s=110.0, phase=0, lanes=LANES, phases=PHASES)
    brief = chat_prompter(tok, style="brief", history=1)(STATE, [(past, 3), (past, 2)])
    assert brief.endswith("<|im_start|>assistant\n<signal>")
    assert "1 decision(s) ago" in brief and "<signal>ELWL</signal>" in brief and "NLSL</signal>" not in brief
    assert "- WTWL: Western through and left-turn lanes" in brief  # the phases, once, in the system prompt
    none = chat_prompter(tok, style="brief", history=0)(STATE, [(past, 3)])
    assert "decision(s) ago" not in none and none.count("ETWT: 20 queued") == 1
    paper = chat_prompter(tok)(STATE, [(past, 3), (past, 2), (past, 1)])
    assert paper.count("decision(s) ago") == 2 and paper.endswith("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="style 'terse'"):
        chat_prompter(tok, style="terse")


def test_the_parser_reads_20_real_smollm2_answers_as_labelled_by_hand():
    """Answers SmolLM2-135M-Instruct gave once (recorded in the fixture), each labelled by hand
    with the phase Algorithm 2 must return: names, cut-off names, an unclosed tag, negations,
    copied state lines, prose without a phase."""
    import json
    from pathlib import Path

    from llmtraffic.signal.prompt import parse_phase

    data = json.loads((Path(__file__).parent / "fixtures" / "smollm2_answers.json").read_text())
    phases = {sc: [Phase(i, p["mnemonic"], p["description"], ()) for i, p in enumerate(ps)]
              for sc, ps in data["phases"].items()}
    answers = data["answers"]
    assert len(answers) == 20 and sum(a["expected"] is None for a in answers) == 9
    for a in answers:
        found = parse_phase(a["answer"], phases[a["scenario"]])
        assert (None if found is None else phases[a["scenario"]][found].mnemonic) == a["expected"], a
