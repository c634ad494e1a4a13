"""The OracleTSC backbones: which can run here, their PPO and decoding settings, loading them.

``surrogate-tiny`` (:mod:`.surrogate`) always runs. The real pretrained models of the model
registry (:mod:`llmtraffic.llm.models`: ``smollm2-135m``, ``qwen2.5-coder-1.5b``) and any
``.gguf`` file of a Llama- or Qwen2-family instruct model run on the CPU from their packaged
GGUF, dequantized once into a cached transformers folder (:mod:`llmtraffic.rl.gguf_weights`),
in fp32 (see :data:`GGUF_PRECISION`). The paper's backbones (§4.1.4: Qwen3-0.6B,
Qwen3-8B, LLaMA3-8B-Instruct) need their weights in the local Hugging Face cache and a GPU; a
local folder holding any causal LM with a chat template runs on the GPU if there is one, else on
the CPU (tests use tiny ones).

Decoding follows each backbone's own generation config (temperature, top-p, top-k), as the
paper does (§4.1.4: "the decoding hyperparameters recommended by each model's authors").
Qwen3's thinking mode is off unless ``PPOConfig.thinking`` asks for it (with at least
``THINKING_MIN_NEW_TOKENS`` new tokens, so the thinking block leaves room for the answer tag).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from .. import study
from ..llm import models
from ..rl import gguf_weights
from ..rl.llm_ppo import LMPolicy, PPOConfig, load_policy_model, torch_threads
from .oracle_training import Prompter, chat_prompter
from .state import IntersectionState
from .surrogate import SurrogateConfig, compact_prompt, load_surrogate, surrogate_params, surrogate_ppo_config, train_surrogate

SURROGATE = "surrogate-tiny"
"""The CPU stand-in backbone (:mod:`.surrogate`)."""

NEEDS_GPU = "needs local weights and a GPU (paper profile)"
"""Why a paper backbone cannot run here."""

NOT_INSTALLED = "its weight packages are not installed (`make venv`: requirements-models.txt)"
"""Why a registered GGUF backbone cannot run here."""

PAPER_BACKBONES = {
    "Qwen3-0.6B": "Qwen/Qwen3-0.6B",
    "Qwen3-8B": "Qwen/Qwen3-8B",
    "LLaMA3-8B": "meta-llama/Meta-Llama-3-8B-Instruct",
}
"""Table 1's backbones (§4.1.4) → Hugging Face model ids looked up in the local cache."""

GATED = {"LLaMA3-8B"}
"""Backbones whose hub repository is gated: accept the licence on the model page, then log in
(``hf auth login``, or ``HF_TOKEN``) before ``hf download``."""

PUBLISHED_CONFIGS = {
    # Qwen/Qwen3-0.6B config.json
    "Qwen3-0.6B": dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645),
    # Qwen/Qwen3-8B config.json
    "Qwen3-8B": dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                     tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645),
    # meta-llama/Meta-Llama-3-8B-Instruct config.json
    "LLaMA3-8B": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128009),
}
"""The published ``config.json`` of each Table 1 backbone: its identity (architecture and size,
:func:`paper_identity`) and the shapes the GPU plan (:mod:`.gpu_plan`) predicts from when its
weights are not here."""

IDENTITY_FIELDS = ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size")
"""The config fields that tell the Table 1 backbones apart."""

PAPER_MEMORY = dict(gradient_checkpointing=True, micro_batch_size=2)
"""How a paper backbone's PPO update fits one 48-GB GPU (the plan, :mod:`.gpu_plan`): activations
recomputed in the backward pass, and each minibatch of 8 exchanges run as micro-batches of 2
whose gradients accumulate (the same step as one batch)."""

TABLE8 = {
    ("Qwen3-0.6B", "hangzhou1x1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.5, hurdle=3.7),
    ("Qwen3-0.6B", "cologne1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.2, hurdle=2.7),
    ("Qwen3-8B", "hangzhou1x1"): dict(actor_lr=3.0e-5, actor_weight_decay=8e-7, clip_low=0.2, clip_high=0.2, hurdle=3.1),
    ("Qwen3-8B", "cologne1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.2, hurdle=3.0),
    ("LLaMA3-8B", "hangzhou1x1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.5, hurdle=3.0),
    ("LLaMA3-8B", "cologne1"): dict(actor_lr=2.5e-5, actor_weight_decay=1e-6, clip_low=0.2, clip_high=0.2, hurdle=3.7),
}
"""A.2 Table 8: per backbone and intersection, the actor's learning rate and weight decay, the
clip bounds ε_l, ε_u (eq. 16) and the hurdle H_R (eq. 8) (CityFlow1x1 = ``hangzhou1x1``)."""

THINKING_MIN_NEW_TOKENS = 2048
"""Fewest new tokens allowed with a thinking mode on: Qwen3's thinking on a prompt of this size
runs to hundreds or thousands of tokens before the ``<signal>`` tag."""

TORCH_THREADS = 1
"""Torch threads while a job runs: the surrogate's batches are too small to gain from more, and
on a shared, loaded 2-core CPU two spinning threads made the surrogate's pre-training 20× and
a fine-tune job ~10× slower (measured)."""


GGUF_PRECISION = "fp32"
"""How a GGUF backbone's frozen base runs here: fp32, where the paper quantises to 4-bit NF4.
On this CPU, bitsandbytes' NF4 prefilled SmolLM2 slower than fp32 (measured, ``docs/backbones.md``)
and :class:`~llmtraffic.rl.small_decoder.SmallDecoder`, the fast sampler, reads fp32 weights;
rollouts and updates then score with the same weights at the same precision."""


def is_real_cpu_backbone(backbone: str) -> bool:
    """Whether ``backbone`` is a registered packaged model or a ``.gguf`` file."""
    return gguf_weights.is_gguf_model(backbone)


def backbone_title(backbone: str) -> str:
    """What a backbone is called in labels: a registered model's card name, else its name."""
    return models.title(backbone) if is_real_cpu_backbone(backbone) else backbone


def hf_path(backbone: str) -> Path | None:
    """A local folder for ``backbone`` (a path, a registered GGUF model or ``.gguf`` file, a
    Table 1 name or a model id), or None."""
    if Path(backbone).is_dir():
        return Path(backbone)
    if is_real_cpu_backbone(backbone):
        return gguf_weights.hf_folder(backbone) if models.installed(backbone) else None
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(PAPER_BACKBONES.get(backbone, backbone), local_files_only=True))
    except Exception:  # not cached, not a valid id, no hub metadata: all mean "not here"
        return None


def backbone_unavailable(backbone: str) -> str | None:
    """Why ``backbone`` cannot be fine-tuned here (``NEEDS_GPU``), or None if it can."""
    if backbone == SURROGATE or Path(backbone).is_dir():
        return None
    if is_real_cpu_backbone(backbone):
        return None if models.installed(backbone) else NOT_INSTALLED
    if not torch.cuda.is_available() or hf_path(backbone) is None:
        return NEEDS_GPU
    return None


def paper_identity(backbone: str) -> str | None:
    """Which Table 1 backbone ``backbone`` is, by the identity of its weights rather than the string
    typed: a Table 1 name or its hub id; else, for weights here, the hub id recorded with them (the
    Hugging Face cache folder ``models--ORG--NAME``) or their ``config.json``'s architecture and
    size (:data:`IDENTITY_FIELDS`); None for anything else (the surrogate, GGUF models)."""
    if backbone in PAPER_BACKBONES:
        return backbone
    by_id = {hub.lower(): name for name, hub in PAPER_BACKBONES.items()}
    if backbone.lower() in by_id:
        return by_id[backbone.lower()]
    if backbone == SURROGATE or is_real_cpu_backbone(backbone):
        return None
    path = hf_path(backbone)
    if path is None:
        return None
    for part in Path(path).resolve().parts:
        if part.startswith("models--") and part[8:].replace("--", "/").lower() in by_id:
            return by_id[part[8:].replace("--", "/").lower()]
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    fields = json.loads(config.read_text())
    fields = {**fields.get("text_config", {}), **fields}
    for name, published in PUBLISHED_CONFIGS.items():
        if all(fields.get(k) == published[k] for k in IDENTITY_FIELDS):
            return name
    return None


def table8_hurdle(backbone: str, scenario: str, default: float) -> float:
    """H_R of Table 8 for a paper backbone (:func:`paper_identity`) on a LibSignal intersection,
    else ``default``."""
    return TABLE8.get((paper_identity(backbone), scenario), {}).get("hurdle", default)


def weights_id(backbone: str) -> str | None:
    """What identifies the weights of an HF backbone (cache key part): the revision of a Hugging
    Face cache snapshot (the commit its folder is named after), else a sha256 of the folder's
    files (names and contents); None where no folder is here."""
    path = hf_path(backbone)
    if path is None:
        return None
    resolved = Path(path).resolve()
    if resolved.parent.name == "snapshots" and resolved.parent.parent.name.startswith("models--"):
        return f"{resolved.parent.parent.name[8:].replace('--', '/')}@{resolved.name}"
    return _folder_sha256(str(resolved))


@functools.lru_cache(maxsize=None)
def _folder_sha256(folder: str) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(folder)).encode() + b"\0")
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def decoding_defaults(path: str | Path | None) -> dict[str, Any]:
    """``temperature``, ``top_p``, ``top_k`` from the backbone's ``generation_config.json``
    (greedy, temperature 0, when it says ``do_sample: false``); empty without one."""
    if path is None or not (Path(path) / "generation_config.json").exists():
        return {}
    from transformers import GenerationConfig

    gen = GenerationConfig.from_pretrained(path)
    if not gen.do_sample:
        return {"temperature": 0.0}
    out = {"temperature": gen.temperature, "top_p": gen.top_p, "top_k": gen.top_k}
    return {k: v for k, v in out.items() if v is not None}


def ppo_config(backbone: str, scenario: str, **overrides: Any) -> PPOConfig:
    """PPO settings for a backbone: the surrogate's; a GGUF backbone's (the A.2 defaults over an
    fp32 base, :data:`GGUF_PRECISION`; the file carries no sampling settings); or for any other
    Table 8's of the Table 1 backbone its weights are (:func:`paper_identity`; 4-bit NF4 base,
    :data:`PAPER_MEMORY`) with the backbone's own decoding settings. ``overrides`` win."""
    if backbone == SURROGATE:
        return surrogate_ppo_config(**overrides)
    if is_real_cpu_backbone(backbone):
        return PPOConfig(**{"load_in_4bit": False, **overrides})
    table8 = {k: v for k, v in TABLE8.get((paper_identity(backbone), scenario), {}).items() if k != "hurdle"}
    decoding = decoding_defaults(hf_path(backbone))
    return PPOConfig(**{"load_in_4bit": True, **PAPER_MEMORY, **decoding, **table8, **overrides})


def settings_text(backbone: str, scenario: str, ppo: dict[str, Any], hurdle: float) -> str:
    """What a caption says a fine-tune of ``backbone`` on ``scenario`` ran with: its H_R (Table 8's
    for a Table 1 backbone, else ``hurdle``) and clip bounds (``ppo``: the notebook's overrides)."""
    cfg = ppo_config(backbone, scenario, **ppo)
    return (f"{backbone}: H_R = {table8_hurdle(backbone, scenario, hurdle):g}, "
            f"ε_l = {cfg.clip_low:g}, ε_u = {cfg.clip_high:g}")


def surrogate_artifact(scenario: str = "cologne1", **overrides: Any):
    """The surrogate pre-trained on ``scenario``'s states (cached, kind ``tsc_surrogate``)."""
    cfg = SurrogateConfig(**{"scenario": scenario, **overrides})

    def build():
        with torch_threads(TORCH_THREADS):
            return train_surrogate(cfg)

    return study.cached("tsc_surrogate", surrogate_params(cfg), build)


def surrogate_prompter(state: IntersectionState, history) -> str:
    """The surrogate reads the compact state only (it has no memory of earlier decisions)."""
    return compact_prompt(state)


def load_backbone(backbone: str, scenario: str, ppo: dict | None = None,
                  surrogate: dict | None = None) -> tuple[LMPolicy, Prompter]:
    """A fresh policy (LoRA adapters initialised to a zero update) and its prompt builder.

    ``surrogate`` overrides :class:`SurrogateConfig` fields (its ``scenario`` defaults to
    ``scenario``); it is ignored for other backbones. A tokenizer without a pad token (LLaMA-3)
    pads with its EOS (:func:`llmtraffic.rl.llm_ppo.pad_token_id`).
    """
    reason = backbone_unavailable(backbone)
    if reason:
        raise RuntimeError(f"backbone {backbone!r}: {reason}")
    cfg = ppo_config(backbone, scenario, **(ppo or {}))
    if backbone == SURROGATE:
        if cfg.thinking:
            raise ValueError("PPOConfig.thinking: surrogate-tiny has no thinking mode")
        model, tok = load_surrogate(surrogate_artifact(**{"scenario": scenario, **(surrogate or {})}))
        return LMPolicy(model, tok, cfg), surrogate_prompter
    if cfg.thinking and cfg.max_new_tokens < THINKING_MIN_NEW_TOKENS:
        raise ValueError(f"PPOConfig.thinking needs max_new_tokens >= {THINKING_MIN_NEW_TOKENS} so the "
                         f"thinking block leaves room for the answer tag; got {cfg.max_new_tokens}")
    from transformers import AutoTokenizer

    path = hf_path(backbone)
    tok = AutoTokenizer.from_pretrained(path)
    prompter = chat_prompter(tok, thinking=cfg.thinking, style=cfg.prompt, history=cfg.prompt_history)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_policy_model(str(path), cfg.load_in_4bit, device=device)
    return LMPolicy(model, tok, cfg), prompter


def backbone_params(backbone: str, scenario: str, ppo: dict | None, surrogate: dict | None) -> dict:
    """What identifies a starting policy (cache key part; ``study.cached`` adds the digest of the
    code the job imports)."""
    params: dict[str, Any] = {"backbone": backbone, "ppo": asdict(ppo_config(backbone, scenario, **(ppo or {})))}
    if backbone == SURROGATE:
        params["surrogate"] = surrogate_params(SurrogateConfig(**{"scenario": scenario, **(surrogate or {})}))
    if is_real_cpu_backbone(backbone):
        params["weights_sha256"] = gguf_weights.gguf_sha256(backbone)
    elif backbone != SURROGATE:
        params["weights"] = weights_id(backbone)
    return json.loads(json.dumps(params))



# ----------------------------------------------------------------------------- prompt lengths

CHARS_PER_TOKEN = 3.5
"""Assumed characters per token where no backbone tokenizer is at hand (typical of English BPE
vocabularies of 128k–152k entries on text with small numbers; not measured here)."""


def episode_messages(scenario: str, decisions: int = 12, seed: int = 0) -> list[list[dict]]:
    """The paper's chat messages (A.4 system prompt, A.5 states with the two most recent
    state–action pairs, §3.1) at each of the first ``decisions`` decisions of an episode of
    ``scenario`` played by the max-queue heuristic."""
    from .prompt import messages

    return [messages(state, history) for state, history in episode_states(scenario, decisions, seed)]


def episode_states(scenario: str, decisions: int = 12, seed: int = 0) -> list[tuple[IntersectionState, list]]:
    """(state, the two most recent (state, action) pairs) at each of the first ``decisions``
    decisions of an episode of ``scenario`` played by the max-queue heuristic."""
    from .controls import MaxQueueController
    from .env import SignalConfig, SignalEnv

    if decisions < 1:
        raise ValueError(f"decisions must be >= 1, got {decisions}")
    out, history, controller = [], [], MaxQueueController()
    with SignalEnv(scenario, SignalConfig(episode_s=10 * decisions), seed=seed) as env:
        _, info = env.reset(seed=seed)
        for _ in range(decisions):
            state = info["state"]
            out.append((state, history[-2:]))
            action = controller.act(state)
            history.append((state, action))
            _, _, term, trunc, info = env.step(action)
            if term or trunc:
                break
    return out


def prompt_tokens(chat: list[dict], tokenizer=None) -> tuple[int, str]:
    """Length of one prompt in tokens and how it was counted: with ``tokenizer``'s chat template
    (generation prompt included), else from the characters at :data:`CHARS_PER_TOKEN`."""
    if tokenizer is not None:
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        return len(ids), "tokenizer"
    chars = sum(len(m["content"]) for m in chat)
    return math.ceil(chars / CHARS_PER_TOKEN), f"assumed {CHARS_PER_TOKEN:g} characters per token"
