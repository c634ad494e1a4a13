"""``PPOConfig``: every hyperparameter of the language-model PPO (OracleTSC Table 8 / A.2 defaults)."""

from __future__ import annotations

from dataclasses import dataclass


ANSWERS = ("free", "constrained")
"""How answers are drawn (:attr:`PPOConfig.answer`)."""


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
    answer: str = "free"
    """``free``: the answer is unconstrained text and the signal study reads its phase with
    Algorithm 2 (the paper's protocol). ``constrained``: the answer must be one of the texts the
    caller gives (the intersection's phase names and the closing tag, after a prompt that opens
    the answer, the ``brief`` prompt's ``<signal>``): its exact distribution over them is
    computed each decision and the G answers drawn from it (:mod:`llmtraffic.rl.constrained`), and
    the update scores each answer under the same mask. A departure, named in the labels."""
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
    micro_batch_size: int = 0
    """Exchanges per forward/backward within a minibatch (0 = the whole minibatch): gradients
    accumulate over its micro-batches, and the advantages' standardisation and the token means
    run over the whole minibatch, so one step equals the minibatch's (within float rounding);
    only the activations of one micro-batch are held at once (:mod:`.memory`)."""
    use_critic: bool = True
    """False = REINFORCE without a critic (Table 7): Monte-Carlo token returns as advantages
    (with ``standardize_advantages=False`` also without Table 7's absent baseline)."""
    standardize_advantages: bool = True
    """Standardise advantages per minibatch (Alg. 1)."""
    seed: int = 0
    """Seeds adapter initialisation, value head, sampling and minibatch shuffling."""

    def __post_init__(self) -> None:
        if self.answer not in ANSWERS:
            raise ValueError(f"PPOConfig.answer must be one of {ANSWERS}, got {self.answer!r}")
        if self.micro_batch_size < 0:
            raise ValueError(f"PPOConfig.micro_batch_size must be >= 0 (0 = the whole minibatch), got {self.micro_batch_size}")
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
