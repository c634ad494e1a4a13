"""The CPU stand-in for a pretrained LLM: ``surrogate-tiny``.

No pretrained weights can be downloaded on the CPU profiles, so the OracleTSC pipeline runs on
a tiny Qwen2-shaped causal LM (built by :mod:`llmtraffic.llm.tiny`) with a byte-level BPE
tokenizer trained in-process. Like the paper's pretrained backbones it starts as a
format-following but mediocre controller: it is supervised briefly to answer after a compact
verbalised state, with labels from a noisy heuristic (the max-queue phase with probability
``p_heuristic``, else a uniformly random phase).

Like a real LLM it names one phase in several surface forms (:data:`SURFACE_FORMS`): the
mnemonic in the tag, the mnemonic in lower case (several tokens), or a sentence with the
phase's description and no tag (many tokens, found by Algorithm 2's second step). Each
supervised answer takes one form at random, so G answers that agree on the phase usually
differ as text: the discrete semantic entropy of eqs. 11–13 (answers clustered by the phase
Algorithm 2 extracts) is then lower than the entropy of identical texts.

It has no chain of thought: answers are the tag alone, so reasoning-trace analyses (Listings
1–2) only apply to real backbones. Every table and figure that uses it says ``surrogate-tiny``.
"""

from __future__ import annotations

import functools

import json
from dataclasses import asdict, dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ..llm.tiny import TinySpec, tiny_model, tiny_tokenizer
from ..rl.llm_ppo import PPOConfig
from .env import SignalConfig, SignalEnv
from .prompt import lane_groups, parse_phase
from .state import IntersectionState, Phase

LABEL = "surrogate-tiny"


@dataclass(frozen=True)
class SurrogateConfig:
    """How the surrogate is built and pre-trained."""

    scenario: str = "cologne1"
    """Scenario whose states (and phases) the supervised start sees."""
    collect_seeds: tuple[int, ...] = (1000, 1001)
    """SUMO seeds of the episodes whose states form the supervised data (keep them apart from
    training and held-out seeds)."""
    episode_s: int = 3600
    """Length of each collection episode."""
    p_heuristic: float = 0.4
    """Probability that a label is the max-queue phase; otherwise a uniformly random phase."""
    steps: int = 300
    """Supervised (cross-entropy) steps on the answers."""
    batch_size: int = 16
    """States per supervised step."""
    lr: float = 1e-3
    """AdamW learning rate of the supervised start (all weights)."""
    hidden: int = 96
    """Hidden size of the Qwen2-shaped model. 96 rather than 128 for the CPU budget of ``quick``:
    a fifth less CPU time per fine-tune, and no worse a policy before fine-tuning on Hangzhou
    (docs/performance.md has the measurements)."""
    layers: int = 2
    """Decoder layers."""
    vocab_size: int = 384
    """BPE vocabulary target (256 bytes + merges + 3 special tokens)."""
    surface_forms: tuple[str, ...] = ("tag", "tag_lower", "sentence")
    """How supervised answers name their phase, one form drawn uniformly per answer
    (:data:`SURFACE_FORMS`); ``("tag",)`` makes the answer one token, so
    semantic and token-level entropy coincide."""
    seed: int = 0
    """Seeds the model initialisation, labels and batches."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "collect_seeds", tuple(self.collect_seeds))
        object.__setattr__(self, "surface_forms", tuple(self.surface_forms))
        unknown = set(self.surface_forms) - set(SURFACE_FORMS)
        if unknown or not self.surface_forms:
            raise ValueError(f"SurrogateConfig.surface_forms must be a non-empty subset of {sorted(SURFACE_FORMS)}, "
                             f"got {list(self.surface_forms)}")
        if not 0 <= self.p_heuristic <= 1:
            raise ValueError(f"SurrogateConfig.p_heuristic must be in [0, 1], got {self.p_heuristic}")
        if self.steps < 0 or self.batch_size < 1:
            raise ValueError(f"SurrogateConfig.steps must be >= 0 and batch_size >= 1, got {self.steps}, {self.batch_size}")
        if not self.collect_seeds:
            raise ValueError("SurrogateConfig.collect_seeds is empty")

    @property
    def spec(self) -> TinySpec:
        return TinySpec(vocab_size=self.vocab_size, hidden=self.hidden, layers=self.layers,
                        heads=4, kv_heads=2, intermediate=2 * self.hidden, seed=self.seed)


@functools.cache
def served_lanes(phase: Phase) -> tuple[str, ...]:
    """The incoming lanes a phase serves, each once, sorted."""
    return tuple(sorted({lane for group in lane_groups(phase).values() for lane in group}))


def phase_queue(state: IntersectionState, phase: Phase) -> int:
    """Queued vehicles on the lanes a phase serves (each lane once)."""
    return sum(state.lanes[lane].queue for lane in served_lanes(phase) if lane in state.lanes)


def max_queue_phase(state: IntersectionState) -> int:
    """The phase serving the most queued vehicles (the first on ties)."""
    return max(state.phases, key=lambda p: phase_queue(state, p)).index


def compact_prompt(state: IntersectionState) -> str:
    """A ~70-token verbalised state: the current phase, then per phase its mnemonic and the
    summed queued / near / mid / far counts of its lanes (the §3.1 observation, A.5 grouping)."""
    parts = [f"now {state.phases[state.phase].mnemonic}"]
    for p in state.phases:
        c = [state.lanes[lane] for lane in served_lanes(p) if lane in state.lanes]
        parts.append(f"{p.mnemonic} q{sum(x.queue for x in c)} n{sum(x.near for x in c)} "
                     f"m{sum(x.mid for x in c)} f{sum(x.far for x in c)}")
    return " ; ".join(parts) + " =>"


TAGS = ["<signal>", "</signal>"]
"""Whole-tag tokens, as instruction-tuned tokenizers have for their tags."""


def _tag(phase: Phase) -> str:
    """``<signal>``, the mnemonic as the same single token the prompt uses (`` NULSUL``),
    ``</signal>``: the phase is one token. Split into pieces (``<``, ``signal``, ``>N``…), PPO
    pushed down the completion of a disfavoured phase after its shared first piece, and an
    early surrogate drifted into cut-off answers (5–19 % invalid)."""
    return f"<signal> {phase.mnemonic}</signal>"


def _tag_lower(phase: Phase) -> str:
    """The mnemonic in lower case inside the tag (several byte-level tokens; Algorithm 2 step 1
    ignores case)."""
    return f"<signal>{phase.mnemonic.lower()}</signal>"


def _sentence(phase: Phase) -> str:
    """A sentence naming the phase by its description, without a tag (Algorithm 2 step 2)."""
    return f"Serve {phase.description[:1].lower()}{phase.description[1:]}."


SURFACE_FORMS = {"tag": _tag, "tag_lower": _tag_lower, "sentence": _sentence}
"""The ways the surrogate may name a phase; EOS follows each."""


def answer_text(phase: Phase, form: str = "tag") -> str:
    """The answer naming ``phase`` in surface form ``form`` (a key of :data:`SURFACE_FORMS`)."""
    if form not in SURFACE_FORMS:
        raise ValueError(f"surface form {form!r} is not one of {sorted(SURFACE_FORMS)}")
    return SURFACE_FORMS[form](phase)


def check_forms(phases: tuple[Phase, ...], forms: tuple[str, ...]) -> None:
    """Every form of every phase must parse back to that phase (a description containing another
    phase's name would make the form ambiguous)."""
    for p in phases:
        for form in forms:
            found = parse_phase(answer_text(p, form), phases)
            if found != p.index:
                raise ValueError(f"surface form {form!r} of phase {p.mnemonic} parses as {found}: "
                                 "the phases' names overlap")


def collect_states(cfg: SurrogateConfig) -> list[IntersectionState]:
    """States seen while the noisy heuristic itself drives the collection episodes."""
    rng = np.random.default_rng([cfg.seed, 1])
    states = []
    # SUMO episodes in fresh processes: a later libsumo start in one process is not bit-reproducible
    with SignalEnv(cfg.scenario, SignalConfig(episode_s=cfg.episode_s, fresh_process=True), seed=cfg.collect_seeds[0]) as env:
        for seed in cfg.collect_seeds:
            _, info = env.reset(seed=seed)
            done = False
            while not done:
                states.append(info["state"])
                _, _, term, trunc, info = env.step(noisy_heuristic(info["state"], cfg.p_heuristic, rng))
                done = term or trunc
    return states


def noisy_heuristic(state: IntersectionState, p_heuristic: float, rng: np.random.Generator) -> int:
    """Max-queue phase with probability ``p_heuristic``, else a uniformly random phase."""
    if rng.random() < p_heuristic:
        return max_queue_phase(state)
    return int(rng.integers(len(state.phases)))


@dataclass
class SurrogateArtifact:
    """A trained surrogate in picklable form (for :func:`llmtraffic.study.cached`)."""

    config: dict
    tokenizer_json: str
    chat_template: str
    weights: dict
    label: str = LABEL


def train_surrogate(cfg: SurrogateConfig) -> SurrogateArtifact:
    """Collect states, train the tokenizer, supervise the tiny LM on noisy-heuristic answers."""
    states = collect_states(cfg)
    phases = states[0].phases
    rng = np.random.default_rng([cfg.seed, 2])
    check_forms(phases, cfg.surface_forms)
    prompts = [compact_prompt(s) for s in states]
    corpus = prompts + [answer_text(p, f) for p in phases for f in cfg.surface_forms]
    tok = tiny_tokenizer(corpus, cfg.vocab_size)
    tok.add_tokens(TAGS)  # plain added tokens: decoding keeps them
    model = tiny_model(tok, cfg.spec)
    prompt_ids = [tok(p, add_special_tokens=False).input_ids for p in prompts]
    answer_ids = {(p.index, f): tok(answer_text(p, f), add_special_tokens=False).input_ids + [tok.eos_token_id]
                  for p in phases for f in cfg.surface_forms}
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    model.train()
    bar = tqdm(range(cfg.steps), desc=f"surrogate pre-training ({cfg.scenario})", leave=False, mininterval=2)
    for _ in bar:
        batch = rng.integers(len(states), size=cfg.batch_size)
        labels = [(noisy_heuristic(states[i], cfg.p_heuristic, rng), cfg.surface_forms[rng.integers(len(cfg.surface_forms))])
                  for i in batch]
        loss = _answer_loss(model, [prompt_ids[i] for i in batch], [answer_ids[a] for a in labels], tok.pad_token_id)
        opt.zero_grad()
        loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    model.eval()
    return SurrogateArtifact(asdict(cfg), tok.backend_tokenizer.to_str(), tok.chat_template,
                             {k: v.detach().clone() for k, v in model.state_dict().items()})


def _answer_loss(model, prompts: list[list[int]], answers: list[list[int]], pad: int) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens (prompt tokens are context only)."""
    seqs = [torch.tensor(p + a) for p, a in zip(prompts, answers)]
    ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad)
    labels = torch.full_like(ids, -100)
    for row, (p, a) in enumerate(zip(prompts, answers)):
        labels[row, len(p) : len(p) + len(a)] = torch.tensor(a)
    attention = (labels != -100) | (torch.arange(ids.shape[1])[None] < torch.tensor([len(p) for p in prompts])[:, None])
    return model(input_ids=ids, attention_mask=attention.long(), labels=labels).loss


def load_surrogate(artifact: SurrogateArtifact):
    """The model and tokenizer of a trained surrogate."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from ..llm.tiny import IM_END, PAD

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(artifact.tokenizer_json),
                                  eos_token=IM_END, pad_token=PAD)
    tok.chat_template = artifact.chat_template
    cfg = SurrogateConfig(**artifact.config)
    model = tiny_model(tok, cfg.spec)
    model.load_state_dict(artifact.weights)
    return model.eval(), tok


def surrogate_params(cfg: SurrogateConfig) -> dict:
    """Cache key parameters (JSON-safe)."""
    return json.loads(json.dumps(asdict(cfg)))


def surrogate_ppo_config(**overrides) -> PPOConfig:
    """PPO settings that suit the surrogate (measured on Cologne1, see DESIGN.md).

    - ``max_new_tokens=32``: the longest surface form (a sentence with the phase description) is
      about 20 tokens + EOS on Cologne1; the margin lets broken answers show.
    - ``top_p=0.95``: a tiny LM keeps a thin tail over its whole vocabulary; nucleus sampling
      drops it, as the paper samples with each model's recommended top-p/top-k (§4.1.4).
    - ``actor_lr=5e-4``, ``critic_lr=1e-3``: Table 8's 2.5e-5 is for 0.6B–8B backbones; the
      surrogate prototype found 5e-4 stable and 2e-3 collapsing into invalid answers.
    """
    return PPOConfig(**{"max_new_tokens": 32, "top_p": 0.95, "actor_lr": 5e-4, "critic_lr": 1e-3, **overrides})
