"""PPO for a causal language-model policy with LoRA adapters (OracleTSC §3.2, A.2, eq. 16, Alg. 1).

Read top to bottom:

1. ``PPOConfig``: every hyperparameter (Table 8 / A.2 defaults).
2. Math on token tensors: K3 KL, token rewards (eq. 1), GAE (eqs. 3–4), the clipped
   surrogate (eqs. 2, 16), the clipped value loss (eq. 5).
3. ``ValueHead`` (A.2) and ``load_policy_model`` (optional 4-bit NF4 base through bitsandbytes).
4. ``LMPolicy``: one batched ``generate`` of G answers per decision (Alg. 1, the first answer
   is the action), the buffer entry it stores (``Exchange``), the PPO update, checkpoints.

Each decision is an independent exchange (§3.2): GAE runs over the tokens of one answer and
the decision's reward sits on its last token; nothing is propagated across decisions.
"""

from __future__ import annotations

import copy

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from . import small_decoder
from .small_decoder import SmallDecoder, common_prefix

# ----------------------------------------------------------------------------- configuration


@dataclass
class PPOConfig:
    """PPO hyperparameters; defaults are the paper's (A.2, Table 8 Qwen3-0.6B/Cologne1)."""

    group_size: int = 8
    """G: answers sampled per decision in one batched generate call (§3.4, Table 12)."""
    max_new_tokens: int = 512
    """O: longest answer in tokens."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy). Log-probabilities use the same scaled logits."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = off)."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    thinking: bool = False
    """Let a backbone with a thinking mode (Qwen3) think before answering. Off by default: the
    prompt already asks for step-by-step analysis in the visible answer, and a thinking block
    uses up the paper's 512 new tokens before the ``<signal>`` tag (see
    :func:`llmtraffic.signal.oracle_training.chat_prompter`)."""
    prompt: str = "paper"
    """Prompt style of a chat backbone: ``paper`` (A.4 + A.5) or ``brief`` (one line per phase,
    answer only; see :data:`llmtraffic.signal.prompt.STYLES`). Like ``thinking``, it shapes
    what the policy reads, so runs that sample together must share it."""
    prompt_history: int = 2
    """State–action pairs of earlier decisions in the prompt (§3.1: the two most recent)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory for long prompts, ~30 % slower)."""
    lora_rank: int = 16
    """LoRA rank r on all linear layers (§4.1.3)."""
    lora_layers: int = 0
    """Adapt the top ``lora_layers`` decoder layers only (0 = every layer, the paper's §4.1.3):
    an update then runs the frozen layers below them without gradients (a departure for speed
    on the CPU, named in the labels where it is used)."""
    stop_text: str = ""
    """End an answer once it has written this text (e.g. ``</signal>``; "" = at the end-of-turn
    token only, as the paper's answers end). Algorithm 2 reads the last valid tag, so stopping
    at the first is a departure (a parameter, named in the labels where it is used)."""
    lora_alpha: int = 32
    """LoRA scaling numerator (alpha / r scales the adapter output)."""
    lora_dropout: float = 0.0
    """Dropout inside the adapters (0 keeps rollout and update log-probs identical)."""
    load_in_4bit: bool = False
    """Quantise the frozen base to 4-bit NF4 with bitsandbytes (QLoRA)."""
    actor_lr: float = 2.5e-5
    """Adapter learning rate (Table 8)."""
    actor_weight_decay: float = 1e-6
    """Adapter AdamW weight decay (Table 8)."""
    critic_lr: float = 1e-5
    """Value-head learning rate (A.2)."""
    critic_weight_decay: float = 5e-7
    """Value-head AdamW weight decay (A.2)."""
    actor_max_grad_norm: float = 0.5
    """Gradient-norm clip for the adapters (A.2)."""
    critic_max_grad_norm: float = 5.0
    """Gradient-norm clip for the value head (A.2)."""
    clip_low: float = 0.2
    """epsilon_l: the ratio is clipped below at 1 - clip_low (eq. 16)."""
    clip_high: float = 0.2
    """epsilon_u: the ratio is clipped above at 1 + clip_high (eq. 16, A.7)."""
    value_clip: float = 0.2
    """epsilon_v of the clipped value loss (eq. 5)."""
    value_coef: float = 1.0
    """alpha of the total loss (eq. 6, §4.1.3)."""
    kl_beta: float = 0.05
    """beta of the per-token KL penalty (eq. 1, A.2)."""
    gamma: float = 0.999
    """Discount over the tokens of one answer (§4.1.3)."""
    gae_lambda: float = 0.95
    """GAE lambda (eq. 4). The paper does not state its Table 1 value; Table 5 tries 0.7 and 1."""
    epochs: int = 1
    """Passes over the buffer per update (Alg. 1 makes one)."""
    minibatch_size: int = 8
    """B: exchanges per gradient step (Alg. 1)."""
    use_critic: bool = True
    """False = REINFORCE without a critic (Table 7): Monte-Carlo token returns as advantages
    (with ``standardize_advantages=False`` also without Table 7's absent baseline)."""
    standardize_advantages: bool = True
    """Standardise advantages per minibatch (Alg. 1)."""
    seed: int = 0
    """Seeds adapter initialisation, value head, sampling and minibatch shuffling."""

    def __post_init__(self) -> None:
        if self.lora_layers < 0:
            raise ValueError(f"PPOConfig.lora_layers must be >= 0 (0 = every layer), got {self.lora_layers}")
        for name in ("group_size", "max_new_tokens", "lora_rank", "epochs", "minibatch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"PPOConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("clip_low", "clip_high", "value_clip", "kl_beta", "temperature"):
            if getattr(self, name) < 0:
                raise ValueError(f"PPOConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.clip_low < 1:
            raise ValueError(f"PPOConfig.clip_low must be in [0, 1), got {self.clip_low}")
        for name in ("gamma", "gae_lambda"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"PPOConfig.{name} must be in [0, 1], got {getattr(self, name)}")


# ----------------------------------------------------------------------------- token math


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token K3 estimate of KL(pi_theta || pi_ref) at the sampled tokens (A.2).

    With r = pi_ref / pi_theta: k3 = r - log r - 1 >= 0, and 0 where the two agree. A.2 writes
    the ratio as p/q; with samples drawn from pi_theta, q/p is the unbiased K3 (Schulman's
    "Approximating KL divergence"); both are >= 0 and vanish together.
    """
    log_r = ref_logp - logp
    return torch.exp(log_r) - log_r - 1


def token_rewards(final_reward: float, logp: Tensor, ref_logp: Tensor, beta: float) -> Tensor:
    """Eq. 1: -beta * KL on every generated token, plus the decision reward on the last one."""
    rewards = -beta * k3_kl(logp, ref_logp)
    rewards[-1] = rewards[-1] + final_reward
    return rewards


def gae(rewards: Tensor, values: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Eqs. 3–4 over one answer: advantages and returns G_l = A_l + V(s_l), with V(s_{O+1}) = 0."""
    advantages = torch.zeros_like(rewards)
    next_value, running = 0.0, 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = values[t]
    return advantages, advantages + values


def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """Monte-Carlo token returns, the REINFORCE advantages when there is no critic (Table 7)."""
    returns = torch.zeros_like(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def standardize(x: Tensor, mask: Tensor) -> Tensor:
    """Zero mean, unit variance over the unmasked entries (Alg. 1 standardises per batch)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + 1e-8) * mask


def clipped_surrogate_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, clip_low: float, clip_high: float, mask: Tensor
) -> Tensor:
    """-J_CLIP of eq. 16: ratio clipped to [1 - eps_l, 1 + eps_u], averaged over tokens."""
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    return -masked_mean(torch.minimum(ratio * advantages, clipped * advantages), mask)


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, value_clip: float, mask: Tensor) -> Tensor:
    """J_value of eq. 5 in the usual PPO form: the new value may move at most eps_v from the
    rollout's value before the loss stops rewarding the move.

    Eq. 5 as printed clips V - G itself, whose square never exceeds the unclipped one, so the
    max would be the plain squared error; clipping around the old value is what PPO
    implementations (and the cited stabilisation) do.
    """
    moved = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    return 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (moved - returns) ** 2), mask)


# ----------------------------------------------------------------------------- networks


class ValueHead(nn.Module):
    """V_phi on the last hidden state: Linear(h, 2h) -> LeakyReLU(0.01) -> Linear(2h, 1) (A.2)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.LeakyReLU(0.01), nn.Linear(2 * hidden, 1))

    def forward(self, h: Tensor) -> Tensor:
        return self.net(h).squeeze(-1)


def disable_cpu_repacking(model: nn.Module) -> int:
    """Stop bitsandbytes from repacking 4-bit weights for CPU inference; returns layers touched.

    bitsandbytes 0.50 on CPUs with AVX512-BF16 converts a ``Linear4bit`` weight into an
    inference-only layout on its first no-grad forward (as in ``generate``) and never converts
    back, so a later training forward crashes (layers with bias) or computes wrong gradients.
    """
    import bitsandbytes as bnb

    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def _is_4bit(model: nn.Module) -> bool:
    import bitsandbytes as bnb

    return any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())


def load_policy_model(source, load_in_4bit: bool = False, device: str | None = None):
    """A causal LM from a path (or an in-memory model), optionally with a 4-bit NF4 base.

    An in-memory model is saved to a temporary folder first, because bitsandbytes quantises
    while loading weights.
    """
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, PreTrainedModel

    if isinstance(source, PreTrainedModel) and not load_in_4bit:
        return source.to(device) if device else source
    if isinstance(source, PreTrainedModel):
        with tempfile.TemporaryDirectory() as tmp:
            source.save_pretrained(tmp)
            return load_policy_model(tmp, load_in_4bit, device)
    if not Path(source).exists():
        raise FileNotFoundError(f"policy model path {source} does not exist")
    quant = None
    if load_in_4bit:
        compute = torch.bfloat16 if device and device.startswith("cuda") else torch.float32
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute)
    model = AutoModelForCausalLM.from_pretrained(source, quantization_config=quant, device_map=device or "cpu")
    if load_in_4bit:
        disable_cpu_repacking(model)
    return model


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with ``n`` torch CPU threads. Tiny models are fastest on one: on a shared 2-core
    machine more threads mostly spin and wait (measured ~100x slower per small forward)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _adapted(modules) -> bool:
    """Whether peft wrapped these projections with adapters (not with ``lora_layers`` below the top)."""
    return all(hasattr(m, "lora_A") for m in modules)


def pad_token_id(tokenizer) -> int:
    """The id that fills padded positions: the tokenizer's pad token, else its EOS.

    LLaMA-3-Instruct's tokenizer has no pad token. Padded positions are masked out of attention
    and of every loss, so any valid id will do; EOS is always one.
    """
    for pad in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if pad is not None:
            return int(pad)
    raise ValueError("the tokenizer has neither a pad nor an EOS token: cannot pad or end answers")


def stop_token_ids(model, tokenizer) -> list[int]:
    """Token ids that end an answer: the tokenizer's EOS and the model's generation-config EOS
    ids (LLaMA-3-Instruct ends a turn with ``<|eot_id|>``, not its tokenizer's EOS)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos = eos if isinstance(eos, list) else [eos]
    ids = [tokenizer.eos_token_id, *eos]
    out = list(dict.fromkeys(int(i) for i in ids if i is not None))
    if not out:
        raise ValueError("neither the tokenizer nor the model's generation config names an EOS token")
    return out


class StopText:
    """Which answers have just written ``text`` (a :data:`small_decoder.Stop`), and where an
    answer ends by it. Only a token that holds the text's last character can end it, so the
    rows' tails are decoded only after such a token."""

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.text = tokenizer, text
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        self.closing = torch.tensor([text[-1] in piece for piece in pieces])
        self.tail = len(tokenizer(text, add_special_tokens=False).input_ids) + 2
        """Tokens decoded to look for the text (its own tokenization, and a little more)."""

    def __call__(self, out: Tensor) -> Tensor:
        ended = torch.zeros(len(out), dtype=torch.bool)
        for row in self.closing[out[:, -1].clamp(max=len(self.closing) - 1)].nonzero()[:, 0].tolist():
            ended[row] = self.text in self.tokenizer.decode(out[row, -self.tail:])
        return ended

    def end(self, answer: Tensor) -> int | None:
        """Tokens of ``answer`` up to the end of the first occurrence of the text, or None."""
        for at in self.closing[answer.clamp(max=len(self.closing) - 1)].nonzero()[:, 0].tolist():
            if self.text in self.tokenizer.decode(answer[max(0, at + 1 - self.tail) : at + 1]):
                return at + 1
        return None


# ----------------------------------------------------------------------------- policy


@dataclass
class Exchange:
    """One decision in the buffer (Alg. 1): the prompt, the chosen (first) answer and what
    PPO needs from the moment it was sampled.

    ``old_logp``, ``ref_logp`` and ``old_values`` are filled in batches by
    :meth:`LMPolicy.score_pending` before the policy next changes, which gives exactly the
    values of the sampling moment at a fraction of the cost of one forward per decision.
    """

    prompt_ids: Tensor
    answer_ids: Tensor
    texts: list[str] = field(default_factory=list)
    """All G decoded answers; ``texts[0]`` is the action."""
    reward: float | None = None
    """Decision reward R (eq. 14), set once the environment has answered."""
    time_s: float = 0.0
    """Simulation time of the decision (the schedule's buffer keeps the last 400 s)."""
    old_logp: Tensor | None = None
    """log pi_old of each answer token."""
    ref_logp: Tensor | None = None
    """log pi_ref (adapters disabled) of each answer token."""
    old_values: Tensor | None = None
    """V_phi(s_l) before each answer token."""
    states: Tensor | None = None
    """With LoRA on the top layers only: the hidden states entering the lowest adapted layer at
    every prompt and answer position (frozen weights below it, so the update starts there)."""


class LMPolicy:
    """A causal LM with LoRA adapters and a value head, trained by PPO on ``Exchange`` buffers."""

    def __init__(self, model, tokenizer, cfg: PPOConfig):
        from peft import LoraConfig, get_peft_model

        self.cfg, self.tokenizer = cfg, tokenizer
        self.rng = np.random.default_rng(cfg.seed)
        self.stop_ids = stop_token_ids(model, tokenizer)
        self.pad_id = pad_token_id(tokenizer)
        self.stop = StopText(tokenizer, cfg.stop_text) if cfg.stop_text else None
        if cfg.load_in_4bit and not _is_4bit(model):
            model = load_policy_model(model, load_in_4bit=True)
        self._reference = SmallDecoder(model) if small_decoder.supports(model) else None
        """pi_ref (the base without adapters) for :meth:`score_pending`, where SmallDecoder runs
        the model; it reads the frozen base weights, which the adapters leave untouched."""
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        depth = model.config.num_hidden_layers
        if cfg.lora_layers > depth:
            raise ValueError(f"PPOConfig.lora_layers = {cfg.lora_layers}: the model has {depth} decoder layers")
        placement: dict = {"target_modules": "all-linear"}
        if cfg.lora_layers:  # peft takes a layer subset only with the modules named
            names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                            if isinstance(m, nn.Linear) and ".layers." in f".{n}"})
            placement = {"target_modules": names, "layers_to_transform": list(range(depth - cfg.lora_layers, depth))}
        self.frozen = depth - cfg.lora_layers if cfg.lora_layers else 0
        """Decoder layers below the adapters (the same in the policy, pi_ref and every update)."""
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          task_type="CAUSAL_LM", **placement)
        with torch.random.fork_rng(devices=[]):  # peft and nn.Linear draw from the global generator
            torch.manual_seed(cfg.seed)
            self.model = get_peft_model(model, lora)
            self.value_head = ValueHead(model.config.hidden_size).to(self.device)
        self.actor_params = [p for p in self.model.parameters() if p.requires_grad]
        self.actor_opt = torch.optim.AdamW(self.actor_params, lr=cfg.actor_lr, weight_decay=cfg.actor_weight_decay)
        self.critic_opt = torch.optim.AdamW(
            self.value_head.parameters(), lr=cfg.critic_lr, weight_decay=cfg.critic_weight_decay
        )
        self.updates = 0
        self.pending: list[Exchange] = []
        """Exchanges sampled since the last update, not yet scored."""
        self.merge_sampler = self.device.type == "cpu" and not _is_4bit(self.model)
        """Sample from merged weights (see `_sampler`); False applies the adapters unmerged."""
        self._merged: nn.Module | SmallDecoder | None = None
        """The model with the adapters merged in, for sampling on CPU (see `_sampler`)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # --- rollout ---------------------------------------------------------------------

    def sample(self, prompt: str, group_size: int | None = None, rng: np.random.Generator | None = None,
               record: bool = True) -> tuple[list[str], Exchange]:
        """G answers to ``prompt`` in one batched generate call; the first is the action (Alg. 1).

        Returns the decoded answers and the buffer entry of the first one. ``rng`` (default: the
        policy's own generator) seeds the sampling; ``record=False`` keeps the exchange out of
        the next update's scoring (evaluation episodes).
        """
        g = group_size or self.cfg.group_size
        prompt_ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(self.device)
        out = self._generate(prompt_ids, g, int((rng or self.rng).integers(2**62)))
        return self._exchange(prompt_ids[0], out, record)

    def _exchange(self, prompt_ids: Tensor, out: Tensor, record: bool) -> tuple[list[str], Exchange]:
        """The decoded answers (rows of ``out``) to ``prompt_ids`` and the first one's exchange."""
        answers = [self._trim(row) for row in out]
        texts = [self.tokenizer.decode(a, skip_special_tokens=True) for a in answers]
        exchange = Exchange(prompt_ids.cpu(), answers[0].cpu(), texts)
        if record:
            self.pending.append(exchange)
        return texts, exchange

    def sample_each(self, prompts: list[str], rngs: list[np.random.Generator],
                    sampler: SmallDecoder | None = None) -> list[str]:
        """One answer to each prompt, drawn with ``rngs[i]`` as ``sample(prompts[i], 1, rngs[i],
        record=False)`` would draw it, but in one batch where the sampler is a
        :class:`SmallDecoder` (several episodes played together, see
        :func:`llmtraffic.signal.evaluation.evaluate_together`); one call per prompt otherwise.
        ``sampler``: a decoder of several checkpoints (:meth:`checkpoints_decoder`), prompt
        block i answered by checkpoint i."""
        if len(prompts) != len(rngs):
            raise ValueError(f"sample_each: {len(prompts)} prompts for {len(rngs)} generators")
        sampler = sampler or self._sampler()
        if not isinstance(sampler, SmallDecoder) or (len(prompts) == 1 and sampler.models == 1):
            return [self.sample(p, 1, rng=rng, record=False)[0][0] for p, rng in zip(prompts, rngs)]
        cfg, tok = self.cfg, self.tokenizer
        ids = [tok(p, return_tensors="pt", add_special_tokens=False).input_ids[0] for p in prompts]
        gens = [torch.Generator().manual_seed(int(rng.integers(2**62))) for rng in rngs]
        out = sampler.sample_each(ids, cfg.max_new_tokens, self.stop_ids, self.pad_id, cfg.temperature, cfg.top_p,
                                  cfg.top_k, gens, stop=self.stop)
        return [tok.decode(self._trim(row), skip_special_tokens=True) for row in out]

    def sample_groups(self, prompts: list[str], rng: np.random.Generator, chunk: int = 64) -> list[list[str]]:
        """G answers to each prompt, as ``[sample(p, rng=rng, record=False)[0] for p in prompts]``
        draws them (one generator seed per prompt from ``rng``, in order), but ``chunk`` prompts per
        batch where the sampler is a :class:`SmallDecoder`: the evaluation's agreement probes,
        ~6x cheaper than one call per prompt (each prompt pre-filled once, its G rows decoded together)."""
        if chunk < 1:
            raise ValueError(f"sample_groups: chunk must be >= 1, got {chunk}")
        sampler = self._sampler()
        if not isinstance(sampler, SmallDecoder):
            return [self.sample(p, rng=rng, record=False)[0] for p in prompts]
        cfg, tok, g = self.cfg, self.tokenizer, self.cfg.group_size
        seeds = [int(rng.integers(2**62)) for _ in prompts]
        texts: list[list[str]] = []
        for start in range(0, len(prompts), chunk):
            block = prompts[start : start + chunk]
            ids = [tok(p, return_tensors="pt", add_special_tokens=False).input_ids[0] for p in block]
            gens = [torch.Generator().manual_seed(s) for s in seeds[start : start + chunk]]
            out = sampler.sample_each(ids, cfg.max_new_tokens, self.stop_ids, self.pad_id, cfg.temperature, cfg.top_p,
                                      cfg.top_k, gens, n=g, stop=self.stop)
            texts += [[tok.decode(self._trim(row), skip_special_tokens=True) for row in out[g * i : g * i + g]]
                      for i in range(len(block))]
        return texts

    def _generate(self, prompt_ids: Tensor, g: int, seed: int) -> Tensor:
        """(g, steps) answer ids to the prompt (1, length), sampled with the config's decoding
        settings from a generator seeded with ``seed``."""
        cfg, sampler = self.cfg, self._sampler()
        if isinstance(sampler, SmallDecoder):
            return sampler.sample(prompt_ids[0], g, cfg.max_new_tokens, self.stop_ids, self.pad_id, cfg.temperature,
                                  cfg.top_p, cfg.top_k, torch.Generator().manual_seed(seed), self.stop)
        sampling = dict(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k)
        sampler.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=self._rng_devices()):
            torch.manual_seed(seed)  # generate draws from torch's global RNG
            out = sampler.generate(
                input_ids=prompt_ids.repeat(g, 1),
                attention_mask=torch.ones(g, prompt_ids.shape[1], dtype=torch.long, device=self.device),
                max_new_tokens=cfg.max_new_tokens,
                pad_token_id=self.pad_id,
                eos_token_id=self.stop_ids,
                **(dict(stop_strings=[cfg.stop_text], tokenizer=self.tokenizer) if cfg.stop_text else {}),
                **(sampling if cfg.temperature > 0 else dict(do_sample=False)),
            )
        return out[:, prompt_ids.shape[1]:]

    def _sampler(self) -> nn.Module | SmallDecoder:
        """What generates: on CPU the model with W + (alpha/r)·B·A merged into each base weight,
        rebuilt after every change of the adapters, run by :class:`SmallDecoder` where it can
        (Qwen2 models such as the surrogate: the base's decoder plus the adapters' deltas), else
        a merged copy run by ``generate``. A small model's forward is mostly per-module
        overhead, which the LoRA wrappers add to every linear layer (measured on the surrogate,
        G = 8: 43–50 ms per sample unmerged, 35–37 ms merged, both through ``generate``). On
        GPU, and over a 4-bit base (merging into NF4 weights would round them), the adapters are
        applied unmerged through ``generate``."""
        if not self.merge_sampler:
            return self.model
        if self._merged is None:
            self._merged = (self._reference.adapted(self._deltas()) if self._reference is not None
                            else copy.deepcopy(self.model).merge_and_unload().eval())
        return self._merged

    def _deltas(self) -> list[dict[str, Tensor]]:
        """Per decoder layer, what merging the adapters adds to each of :data:`small_decoder.LINEARS`
        (peft's own delta weights, q/k/v and gate/up concatenated as the decoder fuses them)."""
        with torch.no_grad():
            return [{name: torch.cat([m.get_delta_weight(m.active_adapters[0]) for m in modules])
                     for name, modules in small_decoder.fused_modules(layer).items() if _adapted(modules)}
                    for layer in self.model.get_base_model().model.layers]

    def _factors(self) -> list[dict[str, tuple[Tensor, Tensor]]]:
        """The adapters as the low-rank factors of :meth:`SmallDecoder.hidden` (differentiable):
        per fused linear layer, its modules' A stacked and their (alpha/r)·B block-diagonal, so
        that x·A'ᵀ·B'ᵀ is each module's x·Aᵀ·Bᵀ·(alpha/r) side by side."""
        def factors(modules) -> tuple[Tensor, Tensor]:
            name = modules[0].active_adapters[0]
            return (torch.cat([m.lora_A[name].weight for m in modules]),
                    torch.block_diag(*(m.lora_B[name].weight * m.scaling[name] for m in modules)))

        return [{name: factors(modules) for name, modules in small_decoder.fused_modules(layer).items()
                 if _adapted(modules)}
                for layer in self.model.get_base_model().model.layers]

    def _trainer(self) -> tuple[SmallDecoder | None, list | None]:
        """What the update's forward runs: the base's decoder with the adapters as factors, where
        the sampler is a decoder of the merged weights and adapters have no dropout (a dropout
        mask per module is not the factors' one) nor checkpointing; else (None, None): the
        adapter-wrapped model."""
        cfg = self.cfg
        if self._reference is None or not self.merge_sampler or cfg.lora_dropout > 0 or cfg.gradient_checkpointing:
            return None, None
        return self._reference, self._factors()

    def checkpoints_decoder(self, checkpoints: list[str | Path]) -> SmallDecoder | None:
        """One :class:`SmallDecoder` over the merged weights of each checkpoint, side by side
        (for playing them together), or None where this policy does not sample through one.
        Leaves the policy loaded with the last checkpoint."""
        if not self.merge_sampler or self._reference is None:
            return None
        decoders = []
        for path in checkpoints:
            self.load(path)
            decoders.append(self._sampler())
        return SmallDecoder.stack(decoders)

    def decoding(self) -> tuple:
        """What two policies must share to sample in one batch: the decoding settings and tokens."""
        cfg = self.cfg
        return (cfg.max_new_tokens, cfg.temperature, cfg.top_p, cfg.top_k, tuple(self.stop_ids), self.pad_id,
                cfg.stop_text)

    def _rng_devices(self) -> list:
        return [self.device] if self.device.type == "cuda" else []

    def _trim(self, answer: Tensor) -> Tensor:
        """Tokens up to and including the first stop token or stop text (generate pads finished
        rows, maybe with a stop token's id)."""
        eos = torch.isin(answer, answer.new_tensor(self.stop_ids)).nonzero()
        end = int(eos[0]) + 1 if len(eos) else len(answer)
        text_end = self.stop.end(answer.cpu()) if self.stop is not None else None
        answer = answer[: min(end, text_end or end)]
        return answer if len(answer) else answer.new_tensor([self.stop_ids[0]])

    def score_pending(self) -> None:
        """Fill log pi_old, log pi_ref and V_old of the exchanges sampled since the last update.

        The policy and value head have not changed since these were sampled, so scoring them now,
        batched, gives the values of the sampling moment (Alg. 1). Where the sampler is a
        :class:`SmallDecoder` (merged weights on CPU), it and the base's decoder score instead of
        the adapter-wrapped model: the same function (a test holds them within 1e-5), at a
        fraction of the per-module overhead.
        """
        self.model.eval()
        sampler = self._sampler() if self.pending else None
        fast = isinstance(sampler, SmallDecoder) and self._reference is not None
        with torch.no_grad():
            for start in range(0, len(self.pending), self.cfg.minibatch_size):
                batch = self.pending[start : start + self.cfg.minibatch_size]
                prompts, answers = [e.prompt_ids for e in batch], [e.answer_ids for e in batch]
                if fast:  # the frozen layers once for both: the policy and pi_ref differ above them only
                    states = self._states(prompts, answers) if self.frozen else None
                    logp, values, _ = self._evaluate(prompts, answers, sampler, states=states)
                    ref_logp, _, _ = self._evaluate(prompts, answers, self._reference, states=states)
                    for row, ex in enumerate(batch if states is not None else []):
                        ex.states = states[row, : len(ex.prompt_ids) + len(ex.answer_ids)].clone()
                else:
                    logp, values, _ = self._evaluate(prompts, answers)
                    with self.model.disable_adapter():  # pi_ref: the same base without adapters
                        ref_logp, _, _ = self._evaluate(prompts, answers)
                for row, ex in enumerate(batch):
                    n = len(ex.answer_ids)
                    ex.old_logp, ex.ref_logp, ex.old_values = (
                        t[row, :n].cpu() for t in (logp, ref_logp, values))
        self.pending = []

    def _ids(self, prompts: list[Tensor], answers: list[Tensor]) -> tuple[Tensor, int]:
        """Prompt + answer ids of a batch, right-padded, and the prompts' common prefix length."""
        seqs = [torch.cat([p.to(self.device), a.to(self.device)]) for p, a in zip(prompts, answers)]
        return (nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=self.pad_id),
                min(common_prefix(prompts[0], p) for p in prompts))

    def _states(self, prompts: list[Tensor], answers: list[Tensor]) -> Tensor:
        """The hidden states entering the lowest adapted layer, of a batch as :meth:`_ids` pads it."""
        ids, shared = self._ids(prompts, answers)
        return self._reference.states(ids, self.frozen, shared)

    def _evaluate(self, prompts: list[Tensor], answers: list[Tensor], decoder: SmallDecoder | None = None,
                  lora: list | None = None, states: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Log-probabilities and values at each answer token of a right-padded batch, computed
        by the adapter-wrapped model or by ``decoder`` (with the low-rank factors ``lora``, see
        :meth:`_factors`; from ``states``, the hidden states entering the lowest adapted layer,
        where given).

        Returns ``logp``, ``values`` and ``mask``, each (batch, longest answer). The LM head runs
        only on answer positions, so memory does not scale with prompt length x vocabulary.
        """
        dev = self.device
        p_len = torch.tensor([len(p) for p in prompts], device=dev)
        a_len = torch.tensor([len(a) for a in answers], device=dev)
        ids, shared = self._ids(prompts, answers)
        attention = (torch.arange(ids.shape[1], device=dev)[None] < (p_len + a_len)[:, None]).long()
        steps = torch.arange(int(a_len.max()), device=dev)
        mask = (steps[None] < a_len[:, None]).float()
        # Hidden state at position P-1+l predicts answer token l (state s_l of §3.1).
        pos = (p_len[:, None] - 1 + steps[None]).clamp(max=ids.shape[1] - 2)
        if decoder is None:
            base = self.model.get_base_model()
            hidden = base.get_decoder()(input_ids=ids, attention_mask=attention).last_hidden_state
            head = base.get_output_embeddings()
        else:  # the prompts' common prefix (system prompt, intersection) computed once per batch
            hidden = decoder.hidden(ids, lora, shared, states, self.frozen if states is not None else 0)
            head = decoder.output
        h = hidden.gather(1, pos[..., None].expand(-1, -1, hidden.shape[-1]))
        logits = head(h).float() / (self.cfg.temperature or 1.0)
        targets = ids.gather(1, pos + 1)
        logp = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1) * mask
        # The critic reads detached features: its loss trains the value head only, so the two
        # optimisers of A.2 each own their parameters.
        values = self.value_head(h.detach().float()) * mask
        return logp, values, mask

    # --- update ----------------------------------------------------------------------

    def advantages(self, ex: Exchange) -> tuple[Tensor, Tensor]:
        """Token advantages and returns of one exchange (eqs. 1, 3–4; Table 7 without critic)."""
        if ex.reward is None:
            raise ValueError("Exchange.reward is None: set the decision reward before updating")
        rewards = token_rewards(ex.reward, ex.old_logp, ex.ref_logp, self.cfg.kl_beta)
        if not self.cfg.use_critic:
            returns = discounted_returns(rewards, self.cfg.gamma)
            return returns, returns
        return gae(rewards, ex.old_values, self.cfg.gamma, self.cfg.gae_lambda)

    def update(self, buffer: list[Exchange]) -> dict[str, float]:
        """One PPO update over ``buffer`` (Alg. 1): shuffle, minibatches, eqs. 5, 6, 16."""
        cfg = self.cfg
        if not buffer:
            raise ValueError("update: the buffer is empty")
        self.score_pending()
        if any(ex.old_logp is None for ex in buffer):
            raise ValueError("update: an exchange in the buffer was not sampled by this policy")
        targets = [self.advantages(ex) for ex in buffer]
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "clip_frac": [], "kl": []}
        self.model.train()
        for _ in range(cfg.epochs):
            order = self.rng.permutation(len(buffer))
            for start in range(0, len(buffer), cfg.minibatch_size):
                idx = order[start : start + cfg.minibatch_size]
                self._step([buffer[i] for i in idx], [targets[i] for i in idx], stats)
        self.updates += 1
        self.model.eval()
        return {k: float(np.mean(v)) for k, v in stats.items() if v}

    def _step(self, batch: list[Exchange], targets: list[tuple[Tensor, Tensor]], stats: dict) -> None:
        cfg, dev = self.cfg, self.device

        def padded(ts: list[Tensor]) -> Tensor:
            return nn.utils.rnn.pad_sequence(ts, batch_first=True).to(dev)

        old_logp, ref_logp, old_values = (padded([getattr(e, k) for e in batch]) for k in ("old_logp", "ref_logp", "old_values"))
        adv, returns = padded([a for a, _ in targets]), padded([r for _, r in targets])
        decoder, lora = self._trainer()
        states = (nn.utils.rnn.pad_sequence([e.states for e in batch], batch_first=True)
                  if decoder is not None and all(e.states is not None for e in batch) else None)
        logp, values, mask = self._evaluate([e.prompt_ids for e in batch], [e.answer_ids for e in batch], decoder, lora,
                                            states)
        if cfg.standardize_advantages:
            adv = standardize(adv, mask)
        policy_loss = clipped_surrogate_loss(logp, old_logp, adv, cfg.clip_low, cfg.clip_high, mask)
        loss = policy_loss
        if cfg.use_critic:
            value_loss = clipped_value_loss(values, old_values, returns, cfg.value_clip, mask)
            loss = policy_loss + cfg.value_coef * value_loss  # eq. 6
            stats["value_loss"].append(value_loss.item())
        self.actor_opt.zero_grad()
        self.critic_opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.actor_params, cfg.actor_max_grad_norm)
        self.actor_opt.step()
        self._merged = None  # the adapters changed
        if cfg.use_critic:
            nn.utils.clip_grad_norm_(self.value_head.parameters(), cfg.critic_max_grad_norm)
            self.critic_opt.step()
        with torch.no_grad():
            ratio = torch.exp(logp - old_logp)
            outside = ((ratio < 1 - cfg.clip_low) | (ratio > 1 + cfg.clip_high)).float()
            stats["policy_loss"].append(policy_loss.item())
            stats["clip_frac"].append(masked_mean(outside, mask).item())
            stats["kl"].append(masked_mean(k3_kl(logp, ref_logp), mask).item())

    # --- checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict:
        """Adapters, value head, both optimisers, the sampling generator and the update count."""
        from peft import get_peft_model_state_dict

        return {
            "adapters": {k: v.cpu() for k, v in get_peft_model_state_dict(self.model).items()},
            "value_head": self.value_head.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "rng": self.rng.bit_generator.state,
            "updates": self.updates,
            "config": asdict(self.cfg),
        }

    def load_state_dict(self, state: dict) -> None:
        from peft import set_peft_model_state_dict

        if state["config"] != asdict(self.cfg):
            changed = sorted(k for k in state["config"] if state["config"][k] != asdict(self.cfg).get(k))
            raise ValueError(f"checkpoint was written with a different PPOConfig (fields {changed})")
        set_peft_model_state_dict(self.model, state["adapters"])
        self._merged = None
        self.value_head.load_state_dict(state["value_head"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.rng.bit_generator.state = state["rng"]
        self.updates = state["updates"]
        self.pending = []  # sampled by the policy just replaced: they can no longer be scored

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(self.state_dict(), tmp)
        tmp.replace(path)  # atomic: a killed run never leaves half a checkpoint

    def load(self, path: str | Path) -> None:
        if not Path(path).exists():
            raise FileNotFoundError(f"checkpoint {path} does not exist")
        self.load_state_dict(torch.load(path, weights_only=False))


class PolicyGroup:
    """Several :class:`LMPolicy` of one base (agent seeds of a table row) that sample in one batch.

    ``sample(prompts)`` gives each policy what its own :meth:`LMPolicy.sample` gives (drawn from
    its own generator, recorded in its own buffer, up to float rounding of the batched
    arithmetic), but where every policy samples through a :class:`SmallDecoder` (CPU), all of
    them run as one stacked decoder: a decoder step of the surrogate costs about the same for
    8 rows as for 40 (per-operation overhead), so training the seeds of a row together costs
    little more per decision than training one. Elsewhere the policies sample one after the other.
    """

    def __init__(self, policies: list[LMPolicy]):
        if not policies:
            raise ValueError("PolicyGroup: no policies")
        if len({p.decoding() for p in policies}) != 1:
            raise ValueError("PolicyGroup: the policies decode differently (max_new_tokens, temperature, top_p, "
                             "top_k or stop tokens); they cannot sample in one batch")
        self.policies = list(policies)
        self._samplers: list | None = None
        self._stacked: SmallDecoder | None = None

    def decoder(self) -> SmallDecoder | None:
        """The policies' current samplers stacked (block i: policy i), or None where one of them
        does not sample through a :class:`SmallDecoder`. Rebuilt when any adapter changed."""
        samplers = [p._sampler() for p in self.policies]
        if not all(isinstance(s, SmallDecoder) for s in samplers):
            return None
        if self._samplers is None or any(a is not b for a, b in zip(samplers, self._samplers, strict=True)):
            self._samplers, self._stacked = samplers, SmallDecoder.stack(samplers)
        return self._stacked

    def sample(self, prompts: list[str], group_size: int | None = None) -> list[tuple[list[str], Exchange]]:
        """``policies[i].sample(prompts[i], group_size)`` for every i, recorded for their updates."""
        if len(prompts) != len(self.policies):
            raise ValueError(f"PolicyGroup.sample: {len(prompts)} prompts for {len(self.policies)} policies")
        sizes = {group_size or p.cfg.group_size for p in self.policies}
        decoder = self.decoder() if len(self.policies) > 1 and len(sizes) == 1 else None
        if decoder is None:
            return [p.sample(q, group_size) for p, q in zip(self.policies, prompts)]
        first, g = self.policies[0], sizes.pop()
        cfg = first.cfg
        ids = [first.tokenizer(q, return_tensors="pt", add_special_tokens=False).input_ids[0] for q in prompts]
        gens = [torch.Generator().manual_seed(int(p.rng.integers(2**62))) for p in self.policies]
        out = decoder.sample_each(ids, cfg.max_new_tokens, first.stop_ids, first.pad_id, cfg.temperature, cfg.top_p,
                                  cfg.top_k, gens, n=g, stop=first.stop)
        return [p._exchange(q, out[g * i : g * i + g], record=True) for i, (p, q) in enumerate(zip(self.policies, ids))]
