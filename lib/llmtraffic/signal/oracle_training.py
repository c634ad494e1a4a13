"""OracleTSC training loop: an LLM controls the signal and learns by PPO (Alg. 1, §4.1.3).

Per decision (every 10 simulated s) the policy samples G answers to the verbalised state in one
batched call; the first answer's phase (Algorithm 2) is applied; the G phases feed the entropy
term of the reward (eqs. 11–14). A reward without that term draws the first answer alone. Every ``update_every_s`` (360 s) the policy is updated on the
exchanges of the last ``buffer_s`` (400 s); adapters and value head are checkpointed every
``checkpoint_every_s`` (720 s). After training, :func:`select_best` picks the checkpoint with
the lowest mean queue on a held-out episode.

Training episodes run like evaluation ones (SUMO in a fresh process per episode), so a run is
reproducible: the same seeds give the same adapters.

Resuming: :func:`train` continues from the newest checkpoint in ``out_dir``. SUMO's state is
not checkpointed, so an episode interrupted mid-way restarts from its beginning with the
policy as of that checkpoint (its earlier updates are kept). Once a run's checkpoint is chosen,
:func:`retain` keeps the best and the last on disk and records the selection in its progress file.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..rl.llm_ppo import Exchange, LMPolicy, PolicyGroup
from ..rl.llm_ppo.adapters import MixedAdapters
from ..rl.small_decoder import SmallDecoder
from .env import SignalConfig, SignalEnv
from .evaluation import evaluate_together
from .oracle import RewardConfig, exact_dse, phase_counts, softmax_dse
from .prompt import BRIEF_OPENING, STYLES, answer_choices, messages, parse_phase
from .state import IntersectionState

Prompter = Callable[[IntersectionState, Sequence[tuple[IntersectionState, int]]], str]
"""Builds the prompt text from the state and the two most recent (state, action) pairs."""


def has_thinking_mode(tokenizer) -> bool:
    """Whether the chat template switches a thinking mode (Qwen3's ``enable_thinking``)."""
    return "enable_thinking" in (tokenizer.chat_template or "")


def chat_prompter(tokenizer, decision_s: int = 10, thinking: bool = False, style: str = "paper",
                  history: int = 2) -> Prompter:
    """The paper's prompt (A.4 system prompt + A.5 states, the ``history`` most recent
    state–action pairs: 2 in §3.1) through the model's chat template, or its ``brief`` style
    (:data:`~llmtraffic.signal.prompt.STYLES`).

    A template with a thinking mode gets it set explicitly (``enable_thinking=thinking``; Qwen3
    defaults to thinking); ``thinking=True`` for a template without one raises ``ValueError``.
    """
    options = {"enable_thinking": thinking} if has_thinking_mode(tokenizer) else {}
    if thinking and not options:
        raise ValueError("thinking=True: this backbone's chat template has no thinking mode")
    if style not in STYLES or history < 0:
        raise ValueError(f"chat_prompter: style {style!r} (one of {STYLES}), history {history} (>= 0)")

    def prompt(state: IntersectionState, past: Sequence[tuple[IntersectionState, int]]) -> str:
        recent = list(past)[-history:] if history else []
        text = tokenizer.apply_chat_template(messages(state, recent, decision_s, style), tokenize=False,
                                             add_generation_prompt=True, **options)
        return text + BRIEF_OPENING if style == "brief" else text

    return prompt


@dataclass
class OracleConfig:
    """The training schedule and reward (OracleTSC §4.1.3, eq. 14)."""

    scenario: str = "cologne1"
    """Intersection to train on (``cologne1``, ``hangzhou1x1``, ``synthetic``)."""
    episodes: int = 2
    """Training episodes."""
    train_seed: int = 0
    """Episode ``e`` uses SUMO seed ``train_seed + e``."""
    episode_s: int = 3600
    """Simulated seconds per episode (§4.1.3)."""
    update_every_s: int = 360
    """Simulated seconds between PPO updates (§4.1.3)."""
    buffer_s: int = 400
    """Each update uses the exchanges of the last ``buffer_s`` simulated seconds (§4.1.3)."""
    checkpoint_every_s: int = 720
    """Simulated seconds between checkpoints of adapters and value head (§4.1.3)."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Decision reward (eq. 14 and its ablations)."""
    invalid_penalty: float = 5.0
    """Subtracted from R when the chosen answer names no valid phase, in vehicles of queue: more
    than most 10-s queue changes, so a broken answer (which keeps the current phase) never pays.
    The paper's backbones rarely break the format; the surrogate can."""
    random_reward_std: float | None = None
    """Control run: R_env is replaced by N(0, std) noise (None = the real reward)."""
    seed: int = 0
    """Seeds the control's noise."""

    def __post_init__(self) -> None:
        if isinstance(self.reward, dict):
            self.reward = RewardConfig(**self.reward)
        for name in ("episodes", "episode_s", "update_every_s", "buffer_s", "checkpoint_every_s"):
            if getattr(self, name) < 1:
                raise ValueError(f"OracleConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.update_every_s % 10 or self.checkpoint_every_s % self.update_every_s:
            raise ValueError("OracleConfig.checkpoint_every_s must be a multiple of update_every_s, "
                             "itself a multiple of the 10-s decision interval; got "
                             f"{self.checkpoint_every_s} and {self.update_every_s}")


class LLMController:
    """``act(state) -> phase`` for :func:`llmtraffic.signal.evaluate`: one sampled answer per
    decision (G = 1), at the policy's temperature, seeded per episode."""

    def __init__(self, policy: LMPolicy, prompter: Prompter, label: str = "llm"):
        self.policy, self.prompter, self.label = policy, prompter, label
        self.reset(0)

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng([seed, 7])
        self.history: deque = deque(maxlen=2)
        self.decisions = self.invalid = 0
        self.traces: list[tuple[str, str]] = []
        """(prompt, answer) per decision, for reasoning-trace listings."""

    def act(self, state: IntersectionState) -> int:
        prompt = self.prompt(state)
        texts, _ = self.policy.sample(prompt, group_size=1, rng=self.rng, record=False, choices=answer_choices(state))
        return self.commit(state, prompt, texts[0])

    def prompt(self, state: IntersectionState) -> str:
        return self.prompter(state, self.history)

    def commit(self, state: IntersectionState, prompt: str, answer: str) -> int:
        """The phase ``answer`` names (Algorithm 2; none keeps the current phase), recorded."""
        found = parse_phase(answer, state.phases)
        action = state.phase if found is None else found
        self.decisions += 1
        self.invalid += found is None
        self.traces.append((prompt, answer))
        self.history.append((state, action))
        return action

    def __repr__(self) -> str:
        return f"LLMController({self.label})"


class LLMControllers:
    """One :class:`LLMController` per episode, answering together for
    :func:`llmtraffic.signal.evaluation.evaluate_together`: one batched sample per decision
    instead of one per episode, each episode drawing from its own generator (so each gets the
    answers it would get alone)."""

    def __init__(self, controllers: Sequence[LLMController], sampler: SmallDecoder | None = None):
        if not controllers:
            raise ValueError("LLMControllers: no controllers")
        if sampler is None and len({id(c.policy) for c in controllers}) != 1:
            raise ValueError("LLMControllers: controllers of several policies need a sampler of all of them")
        if len({c.policy.decoding() for c in controllers}) != 1:
            raise ValueError("LLMControllers: the controllers' policies decode differently")
        policy = controllers[0].policy
        if sampler is None and len(controllers) > 1 and not isinstance(policy._sampler(), SmallDecoder):
            sampler = MixedAdapters(policy)  # generate's path: the episodes' prompts in one batch
        self.controllers, self.sampler = list(controllers), sampler
        """``sampler``: a decoder of several models (checkpoints, :meth:`~llmtraffic.rl.llm_ppo.LMPolicy.
        checkpoints_decoder`, or policies, :meth:`~llmtraffic.rl.llm_ppo.PolicyGroup.decoder`), an
        equal block of the episodes per model in order; None: the policy's own."""

    def reset(self, seeds: Sequence[int]) -> None:
        for controller, seed in zip(self.controllers, seeds, strict=True):
            controller.reset(seed)

    def act(self, episodes: Sequence[int], states: Sequence[IntersectionState]) -> list[int]:
        those = [self.controllers[i] for i in episodes]
        prompts = [c.prompt(s) for c, s in zip(those, states)]
        answers = those[0].policy.sample_each(prompts, [c.rng for c in those], self.sampler, answer_choices(states[0]))
        return [c.commit(s, p, a) for c, s, p, a in zip(those, states, prompts, answers)]

    def label(self, episode: int) -> str:
        return repr(self.controllers[episode])


def evaluate_policy(policy: LMPolicy, prompter: Prompter, scenario: str, seeds: Sequence[int],
                    episode_s: int = 3600, label: str = "llm", sampler: SmallDecoder | None = None) -> list[dict]:
    """LibSignal metrics of the policy on held-out seeds (played together), with the share of
    invalid answers; ``sampler`` as in :class:`LLMControllers`."""
    controllers = [LLMController(policy, prompter, label) for _ in seeds]
    results = evaluate_together(scenario, LLMControllers(controllers, sampler), seeds, episode_s)
    return [{**r, "invalid_rate": c.invalid / max(c.decisions, 1)} for r, c in zip(results, controllers)]


def semantic_phases(texts: Sequence[str], state: IntersectionState) -> tuple[list[int], list[bool]]:
    """The phase each of G answers names (Algorithm 2; an answer naming none keeps the current
    phase) and whether it named one. Answers are clustered by these phases, not by their text,
    for the entropy term (eqs. 11–13): "<signal> NTST</signal>" and "Serve north-south through."
    are one class."""
    found = [parse_phase(t, state.phases) for t in texts]
    return [state.phase if f is None else f for f in found], [f is not None for f in found]


def decide(policy: LMPolicy, prompter: Prompter, state: IntersectionState, history,
           group_size: int | None = None) -> tuple[int, bool, np.ndarray, Exchange]:
    """Alg. 1's inner step: G answers (``group_size``, default the policy's), the first one's
    phase, the histogram of all of them (Alg. 3)."""
    texts, exchange = policy.sample(prompter(state, history), group_size=group_size, choices=answer_choices(state))
    return (*judge(texts, state), exchange)


def judge(texts: Sequence[str], state: IntersectionState) -> tuple[int, bool, np.ndarray]:
    """The first answer's phase and whether it named one, and the histogram of the G phases."""
    phases, valid = semantic_phases(texts, state)
    return phases[0], valid[0], phase_counts(phases, len(state.phases))


Request = tuple[str, int | None, tuple[str, ...]]
"""What a training run asks of its policy at a decision: G answers (``group_size``; None: the
policy's own G) to a prompt, constrained answers among ``choices``, answered with
``policy.sample(prompt, group_size, choices=choices)``'s result."""
Training = Generator[Request, tuple[list[str], Exchange], dict]
"""A training run as a generator of :data:`Request`: :func:`train` answers them one run at a
time, :func:`train_together` for several runs in one batch."""


def _alone(policy: LMPolicy, run: Training) -> dict:
    """Drive ``run``, answering each request with ``policy.sample``; its result."""
    try:
        request = next(run)
        while True:
            prompt, size, choices = request
            request = run.send(policy.sample(prompt, size, choices=choices))
    except StopIteration as done:
        return done.value


def train_episode(env: SignalEnv, policy: LMPolicy, prompter: Prompter, cfg: OracleConfig, seed: int,
                  on_checkpoint: Callable[[int], None], rng: np.random.Generator) -> dict:
    """One training episode (Alg. 1): act, reward, update every ``update_every_s``; see
    :func:`_episode`."""
    return _alone(policy, _episode(env, policy, prompter, cfg, seed, on_checkpoint, rng))


def _episode(env: SignalEnv, policy: LMPolicy, prompter: Prompter, cfg: OracleConfig, seed: int,
             on_checkpoint: Callable[[int], None], rng: np.random.Generator, progress: bool = True) -> Training:
    """One training episode (Alg. 1): act, reward, update every ``update_every_s``.

    A reward without an entropy term reads only the chosen answer, so only that one is drawn
    (G = 1): the first of G answers has the same distribution, and PPO trains on it alone.

    Returns the episode's metrics, mean reward, invalid-answer share, mean token KL, and
    ``update_stats``: per PPO update its policy loss, value loss, clip fraction and KL (Fig. 12),
    and the mean queue, valid-answer share and normalised phase entropy (exact with constrained
    answers, else of the G answers' phases) of the decisions it learnt from (a learning curve);
    with constrained answers, ``dse``: per decision the softmax DSE (eq. 11) estimated from the G
    answers and the exact one (:attr:`RewardConfig.exact`).

    With ``cfg.reward.exact`` the reward's entropy term reads the exact phase distribution: eq. 11
    with the expected counts G·p in place of the G answers' counts (the estimate's limit)."""
    group_size = None if cfg.reward.reads_answers else 1
    _, info = env.reset(seed=seed)
    history: deque = deque(maxlen=2)
    buffer: list[Exchange] = []
    rewards, invalid, updates, dse = [], 0, [], []
    window: list[tuple[float, bool, float]] = []  # (queue, valid, phase entropy) of the decisions since the last update
    bar = tqdm(total=cfg.episode_s // 10, desc=f"LLM PPO episode (seed {seed})", unit="decision", leave=False,
               mininterval=2, disable=not progress)
    done = False
    while not done:
        state = info["state"]
        texts, exchange = yield prompter(state, history), group_size, answer_choices(state)
        action, valid, counts = judge(texts, state)
        exact = phase_distribution(exchange, state)
        if cfg.reward.exact and exact is None:
            raise ValueError("RewardConfig.exact: the exact DSE needs constrained answers (PPOConfig.answer)")
        if exact is not None:  # the paper's estimate from the G answers beside the exact value, same decision
            dse.append([softmax_dse(counts, action, cfg.reward.tau), exact_dse(exact, action, cfg.reward.tau, len(texts))])
        used = len(texts) * exact if cfg.reward.exact else counts
        _, _, terminated, truncated, info = env.step(action)
        if cfg.random_reward_std is None:
            reward = cfg.reward(state, action, info["state"], used)
        else:
            reward = cfg.reward.from_r_env(float(rng.normal(0.0, cfg.random_reward_std)), used, action)
        exchange.reward = reward - (0.0 if valid else cfg.invalid_penalty)
        exchange.time_s = info["time_s"]
        buffer.append(exchange)
        history.append((state, action))
        rewards.append(exchange.reward)
        invalid += not valid
        window.append((info["state"].total_queue, valid, phase_entropy(exact if exact is not None else counts)))
        bar.update()
        bar.set_postfix(queue=info["state"].total_queue, reward=f"{np.mean(rewards):.2f}", refresh=False)
        t = info["time_s"]
        if t % cfg.update_every_s == 0:
            buffer = [e for e in buffer if e.time_s > t - cfg.buffer_s]
            queue, valid_share, entropy = np.mean(window, axis=0)  # the learning curve: before each update
            updates.append({**policy.update(buffer), "queue": float(queue), "valid_rate": float(valid_share),
                            "phase_entropy": float(entropy)})
            window = []
        if t % cfg.checkpoint_every_s == 0:
            on_checkpoint(t)
        done = terminated or truncated
    bar.close()
    summary = env.summary()
    return {"seed": seed, "queue": summary["queue"], "travel_time_s": summary["travel_time_s"],
            "mean_reward": float(np.mean(rewards)), "invalid_rate": invalid / len(rewards),
            "kl": float(np.mean([u["kl"] for u in updates])) if updates else 0.0,
            "updates": len(updates), "update_stats": updates, "dse": dse}


def phase_distribution(exchange: Exchange, state: IntersectionState) -> np.ndarray | None:
    """The exact probability of each phase (by phase index) of a constrained exchange, whose
    choices are :func:`answer_choices` of ``state``; None for a free answer."""
    if getattr(exchange, "probs", None) is None:
        return None
    out = np.zeros(len(state.phases))
    out[[p.index for p in state.phases]] = exchange.probs.double().numpy()
    return out


def phase_entropy(weights: np.ndarray) -> float:
    """Normalised entropy (0: one phase, 1: uniform) of phase probabilities or counts."""
    p = np.asarray(weights, dtype=float) / np.sum(weights)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum() / np.log(len(weights))) + 0.0 if len(weights) > 1 else 0.0


def train(policy: LMPolicy, prompter: Prompter, cfg: OracleConfig, out_dir: str | Path) -> dict:
    """Train for ``cfg.episodes`` episodes, checkpointing into ``out_dir``; resumes if it holds a run.

    Returns ``{"episodes": [per-episode stats], "checkpoints": [paths in order]}``.
    """
    return _alone(policy, _training(policy, prompter, cfg, out_dir))


def train_together(policies: Sequence[LMPolicy], prompter: Prompter, cfgs: Sequence[OracleConfig],
                   out_dirs: Sequence[str | Path]) -> list[dict]:
    """``train(policies[i], prompter, cfgs[i], out_dirs[i])`` for every i, in lockstep: at each
    decision the runs that ask for the same G sample in one batch (:class:`PolicyGroup`), each
    from its own generator, so each run gets what it gets alone (up to float rounding of the
    batched arithmetic; the agent seeds of a table row, trained at the cost of little more than
    one). Each run keeps its own checkpoints, progress file and resumption."""
    if not len(policies) == len(cfgs) == len(out_dirs):
        raise ValueError(f"train_together: {len(policies)} policies, {len(cfgs)} configs, {len(out_dirs)} folders")
    runs = [_training(p, prompter, c, o, progress=False) for p, c, o in zip(policies, cfgs, out_dirs)]
    requests: dict[int, Request] = {}
    results: list[dict] = [{}] * len(runs)
    groups: dict[tuple[int, ...], PolicyGroup] = {}

    def advance(i: int, answer: tuple[list[str], Exchange] | None = None) -> None:
        try:
            requests[i] = next(runs[i]) if answer is None else runs[i].send(answer)
        except StopIteration as done:
            results[i] = done.value
            requests.pop(i, None)

    for i in range(len(runs)):
        advance(i)
    together = f", {len(runs)} runs together" if len(runs) > 1 else ""
    bar = tqdm(total=sum(c.episodes * c.episode_s // 10 for c in cfgs), desc=f"LLM PPO{together}",
               unit="decision", leave=False, mininterval=2)
    while requests:
        by_size: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        for i, (_, size, choices) in requests.items():
            by_size.setdefault((size or policies[i].cfg.group_size, choices), []).append(i)
        for (size, choices), members in by_size.items():
            if tuple(members) not in groups:
                groups[tuple(members)] = PolicyGroup([policies[i] for i in members])
            group = groups[tuple(members)]
            answers = group.sample([requests[i][0] for i in members], size, choices)
            for i, answer in zip(members, answers):
                advance(i, answer)
            bar.update(len(members))
    bar.close()
    return results


def _training(policy: LMPolicy, prompter: Prompter, cfg: OracleConfig, out_dir: str | Path,
              progress: bool = True) -> Training:
    """:func:`train` as a generator of :data:`Request`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    progress_file = out / "progress.json"
    progress_log = {"config": json.loads(json.dumps(asdict(cfg))), "episodes": [], "checkpoints": []}
    if progress_file.exists():
        saved = json.loads(progress_file.read_text())
        if saved["config"] != progress_log["config"]:
            raise ValueError(f"{out} holds a run with a different OracleConfig; use another folder")
        progress_log = saved
        if progress_log["checkpoints"]:
            policy.load(out / progress_log["checkpoints"][-1])
    rng = np.random.default_rng([cfg.seed, len(progress_log["episodes"])])
    # Every SUMO episode in a fresh process, as in evaluation: a later libsumo start in one
    # process is not bit-reproducible on Cologne1, which made two runs of one seed differ.
    env_cfg = SignalConfig(episode_s=cfg.episode_s, fresh_process=True)
    with SignalEnv(cfg.scenario, env_cfg, seed=cfg.train_seed) as env:
        for episode in range(len(progress_log["episodes"]), cfg.episodes):

            def checkpoint(t: int, episode: int = episode) -> None:
                name = f"ep{episode}_t{t:05d}.pt"
                policy.save(out / name)
                if name in progress_log["checkpoints"]:  # a resumed episode overwrites its old checkpoints
                    progress_log["checkpoints"].remove(name)
                progress_log["checkpoints"].append(name)
                _write_json(progress_file, progress_log)

            stats = yield from _episode(env, policy, prompter, cfg, cfg.train_seed + episode, checkpoint, rng, progress)
            progress_log["episodes"].append({"episode": episode, **stats})
            _write_json(progress_file, progress_log)
    return {"episodes": progress_log["episodes"], "checkpoints": [out / c for c in progress_log["checkpoints"]],
            **({"selection": progress_log["selection"], "best": out / progress_log["best"]} if "best" in progress_log else {})}


def retain(out_dir: str | Path, best: Path, rows: list[dict]) -> list[str]:
    """Keep the best and the last checkpoint of a finished run in ``out_dir`` and delete the others,
    after writing the selection (one row per checkpoint, :func:`select_best`) into its
    ``progress.json``; returns the names deleted. A resumed run reads the selection from there
    instead of playing the deleted checkpoints again."""
    out = Path(out_dir)
    progress_file = out / "progress.json"
    log = json.loads(progress_file.read_text())
    keep = {Path(best).name, log["checkpoints"][-1]}
    log.update(selection=rows, best=Path(best).name, kept=sorted(keep))
    _write_json(progress_file, log)  # the record first: a run killed while deleting still knows every result
    gone = [c for c in log["checkpoints"] if c not in keep]
    for name in gone:
        (out / name).unlink(missing_ok=True)
    return gone


def select_best(policy: LMPolicy, prompter: Prompter, checkpoints: Sequence[Path], scenario: str,
                seed: int, episode_s: int = 3600) -> tuple[Path, list[dict]]:
    """The checkpoint with the lowest mean queue on the held-out episode ``seed`` (§4.1.3).

    Leaves ``policy`` loaded with the best checkpoint; returns it with one row per candidate.
    """
    return select_best_together([policy], prompter, [checkpoints], scenario, seed, episode_s)[0]


def select_best_together(policies: Sequence[LMPolicy], prompter: Prompter, checkpoints: Sequence[Sequence[Path]],
                         scenario: str, seed: int, episode_s: int = 3600) -> list[tuple[Path, list[dict]]]:
    """:func:`select_best` of each policy among its own checkpoints, every candidate of every
    policy played together where they sample through :class:`SmallDecoder` (the same numbers,
    one batch per decision); the candidates of one policy that samples through ``generate``
    together as mixed adapters (:class:`~llmtraffic.rl.llm_ppo.adapters.MixedAdapters`, one
    batch per decision); one after the other elsewhere."""
    if len(checkpoints) != len(policies):
        raise ValueError(f"select_best: {len(checkpoints)} lists of checkpoints for {len(policies)} policies")
    if not all(checkpoints):
        raise ValueError("select_best: no checkpoints")
    decoders = [p.checkpoints_decoder(list(c)) for p, c in zip(policies, checkpoints)]
    if all(isinstance(d, SmallDecoder) for d in decoders) or len(decoders) == 1:
        everyone = SmallDecoder.stack(decoders) if isinstance(decoders[0], SmallDecoder) else decoders[0]
        results = evaluate_policy(policies[0], prompter, scenario, [seed] * everyone.models, episode_s, sampler=everyone)
        bounds = np.cumsum([0, *map(len, checkpoints)])
        per_policy = [results[a:b] for a, b in zip(bounds, bounds[1:])]
    else:  # one checkpoint after the other
        per_policy = []
        for policy, paths in zip(policies, checkpoints):
            results = []
            for path in paths:
                policy.load(path)
                results += evaluate_policy(policy, prompter, scenario, [seed], episode_s)
            per_policy.append(results)
    for d in decoders:
        if isinstance(d, MixedAdapters):
            d.close()
    return [_best(policy, paths, results) for policy, paths, results in zip(policies, checkpoints, per_policy)]


def _best(policy: LMPolicy, checkpoints: Sequence[Path], results: list[dict]) -> tuple[Path, list[dict]]:
    """The candidate with the lowest queue among those that did not deadlock, loaded into ``policy``."""
    rows = [{"checkpoint": Path(path).name, "queue": r["queue"], "deadlock": r["deadlock"], "invalid_rate": r["invalid_rate"]}
            for path, r in zip(checkpoints, results)]
    best = min(range(len(rows)), key=lambda i: (rows[i]["deadlock"], rows[i]["queue"]))
    policy.load(checkpoints[best])
    return Path(checkpoints[best]), rows


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)
