"""Sampling from a small Qwen2 model on CPU in plain torch: one prefill of the prompt, a KV cache
shared by the G answers, and a few tensor operations per layer and token.

For the signal study's surrogate (2 layers, hidden 128) ``model.generate`` spends nearly all of
its time in per-module Python overhead, not arithmetic (measured: ~4.5 ms per forward of 8 rows,
~6 of them per answer), and it pre-fills the same prompt G times. :class:`SmallDecoder` computes
the same function from the same weights (a test holds its logits to the model's within 1e-5)
and samples with the same processors as ``generate`` (temperature, top-k, then top-p), drawing
from a ``torch.Generator`` the caller seeds. It reads the weights of an adapter-free model (the
policy gives it its merged copy) and is rebuilt whenever they change.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def supports(model) -> bool:
    """Whether :class:`SmallDecoder` can run ``model``: a Qwen2 causal LM with default RoPE,
    full attention and SiLU, in float32 on CPU."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", "") != "qwen2":
        return False
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    weight = model.get_input_embeddings().weight
    return (rope == "default" and not getattr(cfg, "use_sliding_window", False) and cfg.hidden_act == "silu"
            and weight.dtype == torch.float32 and weight.device.type == "cpu")


class SmallDecoder:
    """KV-cache decoding of ``model`` (see :func:`supports`), weights read at construction."""

    def __init__(self, model):
        if not supports(model):
            raise ValueError("SmallDecoder runs float32 Qwen2 models with default RoPE on CPU only")
        cfg, core = model.config, model.model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.embed = core.embed_tokens.weight
        self.lm_head = model.lm_head.weight
        self.norm = (core.norm.weight, core.norm.variance_epsilon)
        self.layers = [self._layer(layer) for layer in core.layers]
        positions = torch.arange(cfg.max_position_embeddings)[None]
        with torch.no_grad():
            cos, sin = core.rotary_emb(self.embed[:1], positions)
        self.cos, self.sin = cos[0], sin[0]  # (positions, head_dim)

    @staticmethod
    def _layer(layer) -> dict:
        a, m = layer.self_attn, layer.mlp
        return {"norm1": (layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon),
                "norm2": (layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon),
                "q": (a.q_proj.weight, a.q_proj.bias), "k": (a.k_proj.weight, a.k_proj.bias),
                "v": (a.v_proj.weight, a.v_proj.bias), "o": (a.o_proj.weight, a.o_proj.bias),
                "gate": m.gate_proj.weight, "up": m.up_proj.weight, "down": m.down_proj.weight}

    # --- the model's function -----------------------------------------------------------

    @staticmethod
    def _rms(x: Tensor, norm: tuple[Tensor, float]) -> Tensor:
        weight, eps = norm
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def _rotate(self, x: Tensor, start: int) -> Tensor:
        """RoPE on (batch, heads, length, head_dim) at positions start, start + 1, …"""
        cos, sin = self.cos[start : start + x.shape[2]], self.sin[start : start + x.shape[2]]
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def forward(self, ids: Tensor, cache: list[tuple[Tensor, Tensor]] | None = None) -> tuple[Tensor, list]:
        """Logits of the last position of each row of ``ids`` (batch, length) following
        ``cache`` (one (keys, values) per layer, or None), and the extended cache."""
        batch, length = ids.shape
        start = 0 if cache is None else cache[0][0].shape[2]
        h = F.embedding(ids, self.embed)
        new_cache = []
        for i, p in enumerate(self.layers):
            x = self._rms(h, p["norm1"])
            q = F.linear(x, *p["q"]).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
            k = F.linear(x, *p["k"]).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
            v = F.linear(x, *p["v"]).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self._rotate(q, start), self._rotate(k, start)
            if cache is not None:
                k, v = torch.cat((cache[i][0], k), 2), torch.cat((cache[i][1], v), 2)
            new_cache.append((k, v))
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None and length > 1,
                                                  enable_gqa=self.heads != self.kv_heads)
            h = h + F.linear(attn.transpose(1, 2).reshape(batch, length, -1), *p["o"])
            x = self._rms(h, p["norm2"])
            h = h + F.linear(F.silu(F.linear(x, p["gate"])) * F.linear(x, p["up"]), p["down"])
        return F.linear(self._rms(h[:, -1], self.norm), self.lm_head), new_cache

    # --- sampling ------------------------------------------------------------------------

    @torch.no_grad()
    def sample(self, prompt: Tensor, n: int, max_new_tokens: int, stop_ids: list[int], pad_id: int,
               temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
               generator: torch.Generator | None = None) -> Tensor:
        """``n`` answers to ``prompt`` (1-D ids) as (n, steps) ids; a finished row is padded with
        ``pad_id`` after its stop token, as ``generate`` does. ``temperature=0``: greedy."""
        logits, cache = self.forward(prompt[None])
        logits = logits.expand(n, -1)
        cache = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in cache]
        stops = torch.tensor(stop_ids)
        done = torch.zeros(n, dtype=torch.bool)
        out = []
        for step in range(max_new_tokens):
            token = next_token(logits, temperature, top_p, top_k, generator)
            token = torch.where(done, torch.full_like(token, pad_id), token)
            out.append(token)
            done |= torch.isin(token, stops)
            if bool(done.all()) or step == max_new_tokens - 1:
                break
            logits, cache = self.forward(token[:, None], cache)
        return torch.stack(out, 1)


def next_token(logits: Tensor, temperature: float, top_p: float, top_k: int,
               generator: torch.Generator | None) -> Tensor:
    """One token per row: argmax at temperature 0, else a draw from :func:`warp`'s scores."""
    if temperature == 0:
        return logits.argmax(-1)
    return torch.multinomial(warp(logits, temperature, top_p, top_k).softmax(-1), 1, generator=generator)[:, 0]


def warp(logits: Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> Tensor:
    """``generate``'s sampling processors in its order: temperature, top-k (0: off), top-p
    (1: off; the most likely token always stays). Removed tokens get -inf."""
    scores = logits / temperature
    if top_k:
        kth = torch.topk(scores, min(top_k, scores.shape[-1]))[0][..., -1:]
        scores = scores.masked_fill(scores < kth, -torch.inf)
    if top_p < 1.0:
        ordered, order = torch.sort(scores, descending=False)
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[..., -1] = False
        scores = scores.masked_fill(drop.scatter(-1, order, drop), -torch.inf)
    return scores
