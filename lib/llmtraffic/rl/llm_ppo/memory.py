"""What a PPO fine-tune of a language-model policy costs on one GPU: peak memory and hours,
predicted from the backbone's config before anything runs.

Memory is counted tensor by tensor, as the code paths of :class:`~.policy.LMPolicy` hold them
(Hugging Face LLaMA/Qwen3 decoder layers, peft LoRA on all seven linear layers of each, an NF4
base through bitsandbytes, PyTorch's fused attention):

- **weights** at their precision: the base's linear layers (NF4: 4 bits plus one fp32 absmax per
  64 weights), embeddings, head and norms at the compute precision;
- **trainable state**: LoRA factors and the value head (A.2) in fp32 with their gradients and
  two AdamW moments (16 bytes per parameter);
- **activations** kept for the backward pass, per token per layer (:func:`saved_per_token`), or
  with gradient checkpointing each layer's input only, plus one layer recomputed at a time;
- **logits** of the answer tokens only (fp32 log-softmax and its gradients, :func:`logit_bytes`);
- **KV cache** of the G answers of a decision in ``generate``.

Hours add the decisions' generation (a per-layer step latency, the weights and the KV cache read
from memory once per step), the prefills, the PPO updates' arithmetic, and the held-out checkpoint
selection and evaluation, at the GPU's published bandwidth and arithmetic rate
(:class:`GPU`, :data:`GPUS`); the assumptions are fields, printed with every plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

GiB = 1024**3

NF4_BYTES = 0.5 + 4 / 64
"""Bytes per NF4 weight: 4 bits, and one fp32 absmax per block of 64 (no double quantisation)."""

LINEARS = 7
"""LoRA-adapted linear layers per decoder layer (q, k, v, o, gate, up, down: peft's all-linear)."""

TRAINABLE_BYTES = 16
"""fp32 parameter, its gradient and AdamW's two moments."""


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's sizes, as its ``config.json`` gives them."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qk_norm: bool
    """Qwen3 normalises each head's query and key (an RMSNorm that keeps fp32 copies)."""

    @classmethod
    def from_config(cls, config: Any) -> Shape:
        """From a transformers config or its dict (``text_config`` of a multimodal one)."""
        c = config if isinstance(config, dict) else config.to_dict()
        c = {**c.get("text_config", {}), **c}
        heads = c["num_attention_heads"]
        return cls(layers=c["num_hidden_layers"], hidden=c["hidden_size"], intermediate=c["intermediate_size"],
                   heads=heads, kv_heads=c.get("num_key_value_heads") or heads,
                   head_dim=c.get("head_dim") or c["hidden_size"] // heads, vocab=c["vocab_size"],
                   tied=bool(c.get("tie_word_embeddings", False)), qk_norm=c.get("model_type") == "qwen3")

    @property
    def q(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim

    def linear_params(self) -> int:
        """Parameters of one decoder layer's linear layers."""
        d = self.hidden
        return 2 * d * self.q + 2 * d * self.kv + 3 * d * self.intermediate

    def lora_params(self, rank: int) -> int:
        """LoRA parameters of one decoder layer: r·(in + out) per adapted linear layer."""
        d, i = self.hidden, self.intermediate
        return rank * (2 * (d + self.q) + 2 * (d + self.kv) + 2 * (d + i) + (i + d))

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def params(self) -> int:
        return self.layers * self.linear_params() + self.embedding_params()


@dataclass(frozen=True)
class Precision:
    """Bytes per number where the policy keeps them."""

    weight: float
    """A base linear weight (NF4 on the GPU)."""
    compute: int
    """Activations, embeddings, the head and norms (bf16 on the GPU, fp32 on the CPU)."""

    @property
    def casts(self) -> bool:
        """Whether peft casts each adapter's input to fp32 (a copy per adapted layer)."""
        return self.compute != 4


GPU_NF4 = Precision(weight=NF4_BYTES, compute=2)
"""The paper profile on a GPU: NF4 base, bf16 compute (:func:`~.model.load_policy_model`)."""
CPU_FP32 = Precision(weight=4, compute=4)
"""Everything fp32 (the CPU)."""


@dataclass(frozen=True)
class Work:
    """One fine-tune's sizes: prompts, answers, batches, schedule."""

    prompt_tokens: int
    answer_tokens: int
    """O, the longest answer (random weights and unfinished answers run to it: the worst case)."""
    group_size: int = 8
    minibatch: int = 8
    micro_batch: int = 0
    """Exchanges per forward/backward (0 = the whole minibatch)."""
    checkpointing: bool = True
    padded: bool = True
    """Rows of a micro-batch differ in length (a padding mask; see :func:`saved_per_token`)."""
    lora_rank: int = 16
    buffer: int = 40
    """Exchanges per update (400 s of 10-s decisions)."""
    episodes: int = 4
    decisions: int = 360
    """Decisions per episode (3600 s / 10 s)."""
    updates_per_episode: int = 10
    checkpoints_per_episode: int = 5
    eval_episodes: int = 5
    probe_every: int = 10
    """An agreement probe (G answers) every ``probe_every`` evaluation decisions."""
    selection_batched: bool = True
    """Checkpoint candidates of the held-out selection decoded in one batch (stacked adapters)."""

    @property
    def micro(self) -> int:
        return min(self.micro_batch or self.minibatch, self.minibatch)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.answer_tokens


def saved_per_token(shape: Shape, prec: Precision, rank: int = 16, padded: bool = True, context: int = 0) -> int:
    """Bytes one decoder layer keeps for the backward pass per token, without checkpointing.

    Counted from what autograd saves in a LLaMA/Qwen3 layer with LoRA on every linear layer and a
    frozen base (which keeps no input: only the adapters need one): each RMSNorm an fp32 copy of
    its input and its reciprocal RMS; each adapter its input in fp32 (one copy per adapter where
    the compute precision is not fp32, else one shared per input, the output projection's being
    the attention output); fused attention its query, keys and values, output
    and log-sum-exp (with a padding mask, ``padded``, transformers repeats the keys and values to
    every query head first, and each layer's attention keeps an fp32 copy of the mask, ``context``
    floats per token; without one the kernel groups them); SwiGLU the gate, its activation and the up projection;
    each LoRA B its rank-r input; Qwen3's query/key norms fp32 copies of both.
    """
    d, i, q, kv, c = shape.hidden, shape.intermediate, shape.q, shape.kv, prec.compute
    norms = 2 * (4 * d + 4)  # the fp32 input and its reciprocal RMS
    # fp32: q/k/v read one input, gate/up another, o the attention's own output (saved by it)
    adapters = 4 * ((3 * d + q + 2 * d + i) if prec.casts else (d + d + i))
    attention = (2 * q + 2 * (q if padded else kv)) * c + 4 * shape.heads + (4 * context if padded else 0)
    mlp = 3 * i * c
    low_rank = LINEARS * rank * 4
    qk = 4 * (q + kv + shape.heads + shape.kv_heads) if shape.qk_norm else 0
    return norms + adapters + attention + mlp + low_rank + qk


def logit_bytes(shape: Shape, answer_tokens: int) -> int:
    """The answer tokens' logits at their peak, in the backward of the log-softmax: its saved fp32
    output, the incoming gradient and the outgoing one (``vocab`` floats each per token)."""
    return 12 * shape.vocab * answer_tokens


def value_head_bytes(shape: Shape, answer_tokens: int) -> int:
    """What the value head (h → 2h → 1, fp32 on detached features) keeps per answer token."""
    return 4 * (shape.hidden + 2 * 2 * shape.hidden) * answer_tokens


@dataclass(frozen=True)
class Memory:
    """Predicted bytes of each part; ``update`` and ``generate`` are the two peaks."""

    weights: float
    trainable: float
    activations: float
    """Kept for the backward pass over one micro-batch (all layers)."""
    recompute: float
    """One layer's activations rebuilt in the backward pass (checkpointing only) with its gradients."""
    logits: float
    kv_cache: float
    """The widest ``generate`` at full length: G answers of a decision, the evaluation episodes,
    or the checkpoints of a batched selection."""
    prefill: float
    """One layer's transient working set while a prompt is pre-filled."""
    candidates: float = 0.0
    """The checkpoints' adapters loaded side by side for a batched selection (fp32)."""

    @property
    def update(self) -> float:
        return self.weights + self.trainable + self.activations + max(self.logits, self.recompute)

    @property
    def generate(self) -> float:
        return self.weights + self.trainable + self.candidates + self.kv_cache + self.prefill

    @property
    def peak(self) -> float:
        return max(self.update, self.generate)


def predict_memory(shape: Shape, work: Work, prec: Precision = GPU_NF4, rows: int | None = None) -> Memory:
    """Peak memory of an update (one micro-batch's forward and backward) and of the widest
    ``generate`` (``rows`` answers, default the most of G, the evaluation episodes and the
    checkpoints of a batched selection, each prompt + O tokens long)."""
    c, d = prec.compute, shape.hidden
    norm_params = (2 * shape.layers + 1) * d
    weights = (shape.layers * shape.linear_params() * prec.weight + (shape.embedding_params() + norm_params) * c)
    trainable = TRAINABLE_BYTES * (shape.layers * shape.lora_params(work.lora_rank) + 2 * d * d + 3 * d + 1)
    b, t = work.micro, work.tokens
    padded = work.padded and b > 1
    per_token = saved_per_token(shape, prec, work.lora_rank, padded=padded, context=t if padded else 0)
    kept = c * d if work.checkpointing else per_token  # a checkpointed layer keeps its input only
    answers = b * work.answer_tokens
    # the final norm's fp32 copy and output over every position, the embeddings' output, the mask
    around = b * t * (4 * d + 2 * c * d) + b * t * t
    activations = shape.layers * kept * b * t + around + value_head_bytes(shape, answers)
    recompute = (per_token + 3 * c * d) * b * t if work.checkpointing else 0
    k = work.episodes * work.checkpoints_per_episode if work.selection_batched else 0
    rows = rows or max(work.group_size, work.eval_episodes, k)
    kv_cache = 2 * shape.layers * shape.kv * c * rows * t
    prefill = work.prompt_tokens * c * (3 * shape.intermediate + 4 * shape.q + 4 * d) + 2 * 4 * shape.vocab * rows
    candidates = 4 * shape.layers * shape.lora_params(work.lora_rank) * k
    return Memory(weights, trainable, activations, recompute, logit_bytes(shape, answers), kv_cache, prefill, candidates)


def fitting_micro_batch(shape: Shape, work: Work, capacity: float, prec: Precision = GPU_NF4) -> int | None:
    """The largest micro-batch (a divisor-free count of exchanges, at most the minibatch) whose
    predicted peak fits ``capacity`` bytes of a GPU (:func:`gpu_peak`), or None if even 1 does not."""
    for m in range(work.minibatch, 0, -1):
        if gpu_peak(predict_memory(shape, replace(work, micro_batch=m), prec)) <= capacity:
            return m
    return None


CUDA_CONTEXT = 0.6 * GiB
"""GPU memory outside PyTorch's allocator (CUDA context, cuBLAS workspaces)."""
FRAGMENTATION = 1.10
"""Reserved over allocated bytes of PyTorch's caching allocator (assumed)."""


def gpu_peak(memory: Memory) -> float:
    """What the GPU must hold for ``memory.peak`` allocated bytes."""
    return memory.peak * FRAGMENTATION + CUDA_CONTEXT


@dataclass(frozen=True)
class GPU:
    """A GPU's published figures and the assumed efficiencies of this code on it."""

    name: str
    memory: float
    """Bytes usable by one process (what ``torch.cuda.get_device_properties`` reports)."""
    bandwidth: float
    """Memory bandwidth, bytes/s."""
    flops: float
    """Dense bf16 tensor-core rate, FLOP/s."""
    utilisation: float = 0.25
    """Share of ``flops`` reached by pre-fills and updates (4-bit dequantisation, LoRA, recompute)."""
    layer_step_s: float = 1.0e-3
    """Latency per decoder layer per decoding step in eager ``generate`` with 4-bit layers and
    unmerged LoRA (kernel launches of ~60 small operations); an assumption, not measured here."""
    stacked_step_s: float = 0.3e-3
    """Added per layer per step when several checkpoints' adapters decode in one batch."""


GPUS = {
    "A6000": GPU("RTX A6000 (48 GB)", memory=47.5 * GiB, bandwidth=768e9, flops=154.8e12),
    "H100": GPU("H100 SXM (80 GB)", memory=79.1 * GiB, bandwidth=3.35e12, flops=989e12, layer_step_s=0.8e-3,
                stacked_step_s=0.25e-3),
}
"""The GPUs the plan prints (published figures; the RTX A6000 is the paper's)."""


@dataclass(frozen=True)
class Hours:
    """Predicted GPU-hours of one fine-tune, by phase."""

    training: float
    updates: float
    selection: float
    evaluation: float

    @property
    def total(self) -> float:
        return self.training + self.updates + self.selection + self.evaluation


def decode_s(shape: Shape, gpu: GPU, prec: Precision, rows: int, context: int, stacked: int = 1) -> float:
    """One decoding step of ``rows`` answers at ``context`` tokens: the per-layer latency, or the
    weights, dequantised copies and KV cache streamed from memory, whichever is longer."""
    weights = shape.layers * shape.linear_params() * (prec.weight + 2 * prec.compute) + shape.vocab * shape.hidden * prec.compute
    kv = 2 * shape.layers * shape.kv * prec.compute * rows * context
    latency = shape.layers * (gpu.layer_step_s + (gpu.stacked_step_s if stacked > 1 else 0.0))
    return max(latency, (weights + kv) / gpu.bandwidth)


def forward_flops(shape: Shape, tokens: int, context: int) -> float:
    """FLOPs of one forward over ``tokens`` positions attending to ``context`` on average."""
    per_token = 2 * shape.layers * shape.linear_params() + 4 * shape.layers * shape.q * context
    return per_token * tokens


def generate_s(shape: Shape, work: Work, gpu: GPU, prec: Precision, rows: int, prompts: int = 1,
               stacked: int = 1) -> float:
    """One batched ``generate``: ``prompts`` distinct prompts pre-filled (a decision's G answers
    share one), ``rows`` answers decoded together to full length by ``stacked`` adapters."""
    prefill = prompts * forward_flops(shape, work.prompt_tokens, work.prompt_tokens // 2) / (gpu.flops * gpu.utilisation)
    context = work.prompt_tokens + work.answer_tokens // 2
    return prefill + work.answer_tokens * decode_s(shape, gpu, prec, rows, context, stacked)


def predict_hours(shape: Shape, work: Work, gpu: GPU, prec: Precision = GPU_NF4) -> Hours:
    """GPU-hours of one fine-tune: the training decisions (G answers each), the PPO updates
    (scoring by the policy and pi_ref, forward, backward and, with checkpointing, a recompute),
    the held-out selection among the checkpoints and the evaluation episodes with their probes."""
    decisions = work.episodes * work.decisions
    training = decisions * generate_s(shape, work, gpu, prec, work.group_size)
    passes = 2 + 3 + (1 if work.checkpointing else 0)  # two scoring forwards; forward + 2x backward; recompute
    update_flops = passes * forward_flops(shape, work.buffer * work.tokens, work.tokens // 2)
    updates = work.episodes * work.updates_per_episode * update_flops / (gpu.flops * gpu.utilisation)
    k = work.episodes * work.checkpoints_per_episode
    if work.selection_batched:
        selection = work.decisions * generate_s(shape, work, gpu, prec, k, prompts=k, stacked=k)
    else:
        selection = k * work.decisions * generate_s(shape, work, gpu, prec, 1)
    probes = work.eval_episodes * math.ceil(work.decisions / work.probe_every)
    evaluation = (work.decisions * generate_s(shape, work, gpu, prec, work.eval_episodes, prompts=work.eval_episodes)
                  + probes * generate_s(shape, work, gpu, prec, work.group_size))
    return Hours(*(s / 3600 for s in (training, updates, selection, evaluation)))
