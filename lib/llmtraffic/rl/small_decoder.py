"""Sampling from a small Qwen2- or Llama-family model on CPU in plain torch: one prefill of the prompt, a KV cache
shared by the G answers, and a few tensor operations per layer and token.

For the signal study's surrogate (2 layers; measured at hidden 128) ``model.generate`` spends nearly all of
its time in per-module Python overhead, not arithmetic (measured: ~4.5 ms per forward of 8 rows,
~6 of them per answer), and it pre-fills the same prompt G times. :class:`SmallDecoder` computes
the same function from the same weights (a test holds its logits to the model's within 1e-5)
and samples with the same processors as ``generate`` (temperature, top-k, then top-p), drawing
from a ``torch.Generator`` the caller seeds. It reads the weights of an adapter-free model;
a policy gives it its adapters merged in (:meth:`SmallDecoder.adapted`) whenever they change,
and trains them through it (the low-rank factors of :meth:`SmallDecoder.hidden`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


LINEARS = ("qkv", "o", "gate_up", "down")
"""The linear layers of a decoder layer (query, key and value projections as one, gate and up
as one: fewer calls per token): the weights a LoRA merge changes."""


def fused_modules(layer) -> dict[str, tuple]:
    """A Qwen2 or Llama decoder layer's projections by the name of the linear layer they form here
    (:data:`LINEARS`): q, k, v as ``qkv``, gate and up as ``gate_up``."""
    attn, mlp = layer.self_attn, layer.mlp
    return {"qkv": (attn.q_proj, attn.k_proj, attn.v_proj), "o": (attn.o_proj,),
            "gate_up": (mlp.gate_proj, mlp.up_proj), "down": (mlp.down_proj,)}


FAMILIES = ("qwen2", "llama")
"""Model types :class:`SmallDecoder` runs: the same layer (RMSNorm, GQA attention with RoPE, SiLU
gated MLP); Qwen2 has q/k/v biases, Llama (SmolLM2) none, and ties its LM head to the
embeddings, which the decoder reads as the head's weight either way."""


def supports(model) -> bool:
    """Whether :class:`SmallDecoder` can run ``model``: a Qwen2 or Llama causal LM with default
    RoPE (no Llama-3 frequency scaling), full attention and SiLU, in float32 on CPU (not over a
    4-bit base)."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", "") not in FAMILIES:
        return False
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    weight = model.get_input_embeddings().weight
    linear = model.model.layers[0].self_attn.q_proj.weight  # a 4-bit base packs it as uint8
    return (rope == "default" and not getattr(cfg, "use_sliding_window", False) and cfg.hidden_act == "silu"
            and weight.dtype == linear.dtype == torch.float32 and weight.device.type == "cpu")


class SmallDecoder:
    """KV-cache decoding of ``model`` (see :func:`supports`), weights read at construction.

    Given ``more`` models that differ from ``model`` in their linear layers only (merged copies
    of one base with different adapters), it runs all of them side by side: in
    :meth:`sample_each` the rows form one equal block per model, in order, and each block's
    linear layers use its own model's weights (one batched matmul for all)."""

    def __init__(self, model, *more):
        if not all(supports(m) for m in (model, *more)):
            raise ValueError("SmallDecoder runs float32 Qwen2 or Llama models with default RoPE on CPU only")
        self.models = 1
        self._kept: tuple[Tensor, KVCache, Tensor | None, int] | None = None
        """The last sampled prompts' common prefix, its cache, and the hidden states entering
        one layer at its positions with that layer (or None, 0) (see :meth:`_prefix`)."""
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
        half = self.head_dim // 2
        # sin with the sign of rotate_half folded in: x·cos + rotate_half(x)·sin = x·cos +
        # roll(x, half)·signed_sin, the same products (negation is exact) in fewer operations
        self.cos, self.sin = cos[0], torch.cat((-sin[0, :, :half], sin[0, :, half:]), -1)  # (positions, head_dim)
        if more:
            stacked = SmallDecoder.stack([self, *(SmallDecoder(m) for m in more)])
            self.models, self.layers = stacked.models, stacked.layers

    @classmethod
    def stack(cls, decoders: list[SmallDecoder]) -> SmallDecoder:
        """One decoder running the models of ``decoders`` side by side, in order (as if built
        from all their models): for sampling several policies of one base together."""
        if not decoders:
            raise ValueError("SmallDecoder.stack: no decoders")
        if len(decoders) == 1:
            return decoders[0]
        first = decoders[0]
        for other in decoders[1:]:
            if not all(torch.equal(a, b) for a, b in zip(first._frozen(), other._frozen(), strict=True)):
                raise ValueError("SmallDecoder.stack: the models differ outside their linear layers")
        out = copy.copy(first)
        out._kept = None
        out.models = sum(d.models for d in decoders)
        out.layers = [{**layers[0], **{name: cls._stacked([layer[name] for layer in layers], [d.models for d in decoders])
                                       for name in LINEARS}}
                      for layers in zip(*(d.layers for d in decoders))]
        return out

    def adapted(self, deltas: list[dict[str, Tensor]]) -> SmallDecoder:
        """This (one-model) decoder with ``deltas[i][name]`` added to the weight of layer i's
        linear layer ``name`` (one of :data:`LINEARS`), all else shared: a LoRA merge
        (W + (alpha/r)·B·A) without copying the model, the same sums ``merge_and_unload`` makes."""
        self._one_model("adapted")
        out = copy.copy(self)
        out._kept = None  # keys and values of the old weights
        out.layers = [{**layer, **{name: (layer[name][0] + d, layer[name][1]) for name, d in delta.items()}}
                      for layer, delta in zip(self.layers, deltas, strict=True)]
        return out

    def _frozen(self) -> list[Tensor]:
        """The weights a LoRA merge leaves alone: embeddings, LM head, norms."""
        return [self.embed, self.lm_head, self.norm[0], *(layer[n][0] for layer in self.layers for n in ("norm1", "norm2"))]

    @staticmethod
    def _stacked(linears: list[tuple[Tensor, Tensor | None]], models: list[int]) -> tuple[Tensor, Tensor | None]:
        """One linear layer of several decoders as (models, in, out) weights and (models, 1, out)
        biases, the operands of one ``baddbmm`` (a one-model decoder holds them as ``nn.Linear``
        does: (out, in) and (out,))."""
        weights = torch.cat([w.detach() if n > 1 else w.detach().t()[None] for (w, _), n in zip(linears, models, strict=True)])
        if linears[0][1] is None:
            return weights, None
        return weights, torch.cat([b.detach() if n > 1 else b.detach()[None, None] for (_, b), n in zip(linears, models, strict=True)])

    @staticmethod
    def _layer(layer) -> dict:
        """One decoder layer's weights: norms as (weight, eps), linear layers as (weight, bias),
        fused as :func:`fused_modules` groups them (one matmul each)."""
        def fused(*modules) -> tuple[Tensor, Tensor | None]:
            weight = torch.cat([m.weight.detach() for m in modules])
            biases = [m.bias for m in modules]
            if all(b is None for b in biases):
                return weight, None
            return weight, torch.cat([b.detach() if b is not None else m.weight.new_zeros(m.out_features)
                                      for m, b in zip(modules, biases)])

        return {"norm1": (layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon),
                "norm2": (layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon),
                **{name: fused(*modules) for name, modules in fused_modules(layer).items()}}

    def _linear(self, x: Tensor, weight: Tensor, bias: Tensor | None,
                lora: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """``x @ weight.T + bias``, plus ``x @ A.T @ B.T`` for ``lora`` = (A, B); with several
        models, row block i uses model i's weight (see :meth:`_stacked` for their layout)."""
        if self.models == 1:
            y = F.linear(x, weight, bias)
            return y if lora is None else y + F.linear(F.linear(x, lora[0]), lora[1])
        rows, length, width = x.shape
        x = x.reshape(self.models, -1, width)
        y = torch.bmm(x, weight) if bias is None else torch.baddbmm(bias, x, weight)
        return y.view(rows, length, -1)

    # --- the model's function -----------------------------------------------------------

    @staticmethod
    def _rms(x: Tensor, norm: tuple[Tensor, float]) -> Tensor:
        weight, eps = norm
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def _rotate(self, x: Tensor, start: int, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """RoPE on (batch, heads, length, head_dim) at positions start, start + 1, … or with
        each row's own ``rope`` (cos, signed sin), each (batch, 1, length, head_dim)."""
        if rope is None:
            cos, sin = self.cos[start : start + x.shape[2]], self.sin[start : start + x.shape[2]]
        else:
            cos, sin = rope
        return x * cos + x.roll(x.shape[-1] // 2, -1) * sin

    def forward(self, ids: Tensor, cache: KVCache | None = None, positions: Tensor | None = None,
                mask: Tensor | None = None) -> tuple[Tensor, KVCache]:
        """Logits of the last position of each row of ``ids`` (batch, length) following
        ``cache`` (or None), and the cache extended by them (the same object); ``positions`` and
        ``mask`` as in :meth:`_trunk`."""
        h, new_cache = self._trunk(ids, cache, positions, mask)
        return self.output(self._rms(h[:, -1], self.norm)), new_cache

    def hidden(self, ids: Tensor, lora: list[dict[str, tuple[Tensor, Tensor]]] | None = None,
               prefix: int = 0, states: Tensor | None = None, start: int = 0) -> Tensor:
        """The last hidden state (after the final norm) at every position of ``ids`` (batch,
        length), as the model's ``last_hidden_state``. Rows may be right-padded: attention is
        causal, so padding after a row's end changes none of its earlier positions.

        ``lora``: per layer, low-rank factors (A, B) added to linear layers by name (see
        :meth:`_linear`), e.g. a policy's adapters, differentiable: the PPO update's forward
        without the adapter wrappers' per-module overhead. Layers below the lowest adapted one
        run without gradients (nothing to train there). ``prefix``: the rows' first ``prefix``
        ids are equal (a constant system prompt), computed once for all rows. ``states``: the
        hidden states entering layer ``start`` (:meth:`states`), which then runs first."""
        self._one_model("hidden")
        h = F.embedding(ids, self.embed) if states is None else states
        return self._rms(self._pass(h, prefix, lora, range(start, len(self.layers))), self.norm)

    def states(self, ids: Tensor, upto: int, prefix: int = 0) -> Tensor:
        """The hidden states entering layer ``upto`` at every position of ``ids`` (as :meth:`hidden`;
        for a later ``hidden(..., states=, start=upto)``, e.g. of models that differ only above)."""
        self._one_model("states")
        return self._pass(F.embedding(ids, self.embed), prefix, None, range(upto))

    def _one_model(self, what: str) -> None:
        if self.models != 1:
            raise ValueError(f"SmallDecoder.{what} runs one model; this decoder holds {self.models}")

    def output(self, h: Tensor) -> Tensor:
        """The LM head: logits of hidden states ``h``, computed as ``lm_head @ h.T``. For the few
        rows of a decoding step, PyTorch's CPU kernel splits that layout over threads where
        ``F.linear`` ran on one (SmolLM2, 8 rows, 2 threads: 10 ms instead of 21 ms per step)."""
        flat = h.reshape(-1, h.shape[-1])
        return torch.mm(self.lm_head, flat.T).T.contiguous().view(*h.shape[:-1], -1)

    def _trunk(self, ids: Tensor, cache: KVCache | None, positions: Tensor | None = None,
               mask: Tensor | None = None, taps: dict | None = None) -> tuple[Tensor, KVCache]:
        """The decoder layers: hidden states before the final norm, and the extended cache (a
        new one without ``cache``).

        Rows of one prompt each (see :meth:`sample_each`) pass their own ``positions`` (batch,
        length) and an attention ``mask`` (batch, 1, length, keys; True = may attend); without
        them, positions follow the cache and attention is causal. ``taps`` {"layer": i} receives
        the hidden states entering layer i under ``"rest"``."""
        length = ids.shape[1]
        rope = None if positions is None else (self.cos[positions][:, None], self.sin[positions][:, None])
        start = 0 if cache is None else cache.length
        h = F.embedding(ids, self.embed)
        computed = []
        for i, p in enumerate(self.layers):
            if taps is not None and i == taps["layer"]:
                taps["rest"] = h
            q, k, v = self._qkv(h, p, {}, start, rope)
            if cache is not None:
                k, v = cache.write(i, k, v)
            else:
                computed.append((k, v))
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                  is_causal=mask is None and cache is None and length > 1,
                                                  enable_gqa=self.heads != self.kv_heads)
            h = self._rest(h, attn, p, {})
        if cache is None:
            return h, KVCache(computed)
        cache.length += length
        return h, cache

    def _qkv(self, h: Tensor, p: dict, extra: dict, start: int, rope=None) -> tuple[Tensor, Tensor, Tensor]:
        """A layer's queries, keys and values of hidden states ``h`` (batch, length, hidden),
        RoPE-rotated at positions from ``start`` (or ``rope``, see :meth:`_rotate`)."""
        batch, length = h.shape[:2]
        x = self._rms(h, p["norm1"])
        qkv = self._linear(x, *p["qkv"], extra.get("qkv")).view(batch, length, self.heads + 2 * self.kv_heads,
                                                                 self.head_dim).transpose(1, 2)
        # queries and keys rotated in one pass (half the small ops of a decoding step's RoPE)
        qk, v = qkv.split([self.heads + self.kv_heads, self.kv_heads], 1)
        q, k = self._rotate(qk, start, rope).split([self.heads, self.kv_heads], 1)
        return q, k, v

    def _rest(self, h: Tensor, attn: Tensor, p: dict, extra: dict) -> Tensor:
        """A layer's output projection and MLP, each added to the residual stream ``h``."""
        batch, length = h.shape[:2]
        h = h + self._linear(attn.transpose(1, 2).reshape(batch, length, -1), *p["o"], extra.get("o"))
        gate, up = self._linear(self._rms(h, p["norm2"]), *p["gate_up"], extra.get("gate_up")).chunk(2, -1)
        return h + self._linear(F.silu(gate) * up, *p["down"], extra.get("down"))

    def _pass(self, h: Tensor, prefix: int, lora: list | None, layers: range) -> Tensor:
        """``layers`` over hidden states ``h`` (rows, length, hidden) without a cache (scoring).
        The rows' first ``prefix`` positions are the same: they are computed once (one row; its
        keys and values expanded to every row, so gradients from every row reach it), the rest
        of each row attends to them."""
        rows, length = h.shape[:2]
        prefix = prefix if rows > 1 and prefix < length else 0
        head, tail = h[:1, :prefix], h[:, prefix:]
        mask = torch.arange(length)[None] <= prefix + torch.arange(length - prefix)[:, None]
        gqa = self.heads != self.kv_heads
        with _FrozenBelow(lora) as gate:
            for i in layers:
                gate.at(i)
                p, extra = self.layers[i], lora[i] if lora is not None else {}
                qt, kt, vt = self._qkv(tail, p, extra, prefix)
                if prefix:
                    qh, kh, vh = self._qkv(head, p, extra, 0)
                    kt = torch.cat((kh.expand(rows, -1, -1, -1), kt), 2)
                    vt = torch.cat((vh.expand(rows, -1, -1, -1), vt), 2)
                    head = self._rest(head, F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=gqa),
                                      p, extra)
                tail = self._rest(tail, F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=gqa),
                                  p, extra)
        return torch.cat((head.expand(rows, -1, -1), tail), 1) if prefix else tail

    # --- sampling ------------------------------------------------------------------------

    @torch.no_grad()
    def sample(self, prompt: Tensor, n: int, max_new_tokens: int, stop_ids: list[int], pad_id: int,
               temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
               generator: torch.Generator | None = None, stop: Stop | None = None,
               constraint: Constraint | None = None) -> Tensor:
        """``n`` answers to ``prompt`` (1-D ids) as (n, steps) ids; a finished row is padded with
        ``pad_id`` after its stop token (or the end of a ``stop`` text), as ``generate`` does.
        ``temperature=0``: greedy."""
        self._one_model("sample")
        return self.sample_each([prompt], max_new_tokens, stop_ids, pad_id, temperature, top_p, top_k, [generator], n,
                                stop, constraint)

    @torch.no_grad()
    def sample_each(self, prompts: list[Tensor], max_new_tokens: int, stop_ids: list[int], pad_id: int,
                    temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                    generators: list[torch.Generator | None] | None = None, n: int = 1,
                    stop: Stop | None = None, constraint: Constraint | None = None) -> Tensor:
        """``n`` answers to each of ``prompts`` (1-D ids, any lengths) in one batch, as (rows, steps)
        ids padded like :meth:`sample`: rows ``n·r`` to ``n·r + n - 1`` answer prompt ``r`` and draw
        from ``generators[r]`` alone, so they are the answers ``sample(prompts[r], n, …,
        generators[r])`` gives (up to float rounding of the batched arithmetic), whatever the
        other rows are.

        The prompts' common prefix is pre-filled once per model (and kept for the next call: see
        :meth:`_prefix`), the rest of each prompt once, its cache shared by its ``n`` rows. The
        rests are left-padded: each row has its own positions, and a mask keeps padding out of
        every row's attention (a padding position sees itself only, so no row is all-masked).
        With several models, ``prompts`` holds one equal block per model (see the class)."""
        rows = len(prompts)
        if generators is not None and len(generators) != rows:
            raise ValueError(f"sample_each: {len(generators)} generators for {rows} prompts")
        last, prompt, lengths, valid = self._prefill(prompts, pad_id)
        logits = self.output(last)
        if n > 1:  # each prompt's rows share its prefill; blocks stay contiguous per model
            logits, lengths = logits.repeat_interleave(n, 0), lengths.repeat_interleave(n, 0)
        gens = generators or [None] * rows
        padding = torch.zeros(valid.shape).masked_fill(~valid, float("-inf"))
        answers = KVCache.empty(len(self.layers), rows * n, self.kv_heads, self.head_dim, max_new_tokens)
        return _decode(logits, answers, max_new_tokens, stop_ids, pad_id, lambda x: draw(x, temperature, top_p, top_k, gens),
                       lambda token, step, answers: self._step(token, prompt, answers, (lengths + step)[:, None], padding),
                       stop, constraint)

    def _prefill(self, prompts: list[Tensor], pad_id: int, taps: dict | None = None, lean: bool = False
                 ) -> tuple[Tensor, KVCache, Tensor, Tensor]:
        """The prompts pre-filled (see :meth:`sample_each`): the final hidden state at each one's
        last position (rows, hidden), their keys and values (one row per prompt, left-padded
        after the common prefix), their lengths, and which keys are real (rows, keys).
        ``taps``: as in :meth:`_trunk` (the prompts' rests only, left-padded). ``lean``: see :meth:`_prefix`."""
        rows, lengths = len(prompts), torch.tensor([len(p) for p in prompts])
        if rows % self.models:
            raise ValueError(f"sample_each: {rows} prompts do not split into {self.models} equal blocks")
        start, prefix = self._prefix(prompts, taps, lean)
        width = int(lengths.max()) - start
        offset = width - (lengths - start)
        ids = torch.full((rows, width), pad_id, dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, int(offset[r]):] = p[start:]
        columns = torch.arange(width)
        valid = torch.cat((torch.ones(rows, start, dtype=torch.bool), columns[None] >= offset[:, None]), 1)  # keys
        causal = torch.arange(start + width)[None, :] <= start + columns[:, None]
        mask = (causal[None] & valid[:, None, :])
        mask[:, :, start:] |= torch.eye(width, dtype=torch.bool)[None]
        cache = prefix.repeated(rows // self.models, width) if prefix is not None else None
        h, prompt = self._trunk(ids, cache, start + (columns[None] - offset[:, None]).clamp(min=0), mask[:, None], taps)
        if taps is not None:
            taps.update(start=start, offset=offset)
        return self._rms(h[:, -1], self.norm), prompt, lengths, valid

    @torch.no_grad()
    def prefill_each(self, prompts: list[Tensor], pad_id: int, upto: int = 0) -> Prefilled:
        """The prompts pre-filled once each (their common prefix kept, as in :meth:`sample_each`),
        for :meth:`extend`. ``upto`` > 0 also keeps the hidden states entering layer ``upto`` at
        their positions (:attr:`Prefilled.taps`)."""
        taps = {"layer": upto} if upto else None
        last, prompt, lengths, valid = self._prefill(prompts, pad_id, taps, lean=True)
        return Prefilled(last, prompt, lengths, torch.zeros(valid.shape).masked_fill(~valid, float("-inf")), taps or {})

    @torch.no_grad()
    def extend(self, pre: Prefilled, rows: Tensor, upto: int = 0) -> tuple[Tensor | None, Tensor | None]:
        """Rows continuing each pre-filled prompt, ``rows`` (prompts, n, length), right-padded
        (attention is causal) and not cached: the final hidden states at their positions
        (prompts, n, length, hidden), and with ``upto`` > 0 the hidden states entering layer
        ``upto`` instead (the final ones are then None: the layers above are not run). A
        prompt's n rows read its keys and values without copying them (:func:`shared_attention`);
        e.g. an answer trie's rows, scored in one forward."""
        count, n, length = rows.shape
        positions = pre.lengths.repeat_interleave(n)[:, None] + torch.arange(length)[None]
        rope = (self.cos[positions][:, None], self.sin[positions][:, None])
        h = F.embedding(rows.reshape(count * n, length), self.embed)
        prompt = pre.cache
        for i, p in enumerate(self.layers):
            if upto and i == upto:
                return None, h.view(count, n, length, -1)
            q, k, v = self._qkv(h, p, {}, 0, rope)
            keys, values = prompt.keys[i][:, :, : prompt.length], prompt.values[i][:, :, : prompt.length]
            h = self._rest(h, shared_attention(q, keys, values, pre.padding, k, v), p, {})
        return self._rms(h, self.norm).view(count, n, length, -1), None

    def _step(self, token: Tensor, prompt: KVCache, answers: KVCache, positions: Tensor,
              padding: Tensor) -> tuple[Tensor, KVCache]:
        """One decoding step of rows answering their prompts: logits after ``token`` (rows,) at
        ``positions`` (rows, 1), and ``answers`` extended by it. The keys and values of the prompts
        (``prompt``, one row per prompt, ``padding`` (prompts, keys): 0 or -inf) are read once for
        all rows of a prompt (:func:`shared_attention`), not copied to each: with G = 8 they were
        most of a SmolLM2 step's memory traffic after the weights."""
        rope = (self.cos[positions][:, None], self.sin[positions][:, None])
        h = F.embedding(token[:, None], self.embed)
        for i, p in enumerate(self.layers):
            q, k, v = self._qkv(h, p, {}, 0, rope)
            k, v = answers.write(i, k, v)
            attn = shared_attention(q, prompt.keys[i][:, :, : prompt.length], prompt.values[i][:, :, : prompt.length],
                                    padding, k, v)
            h = self._rest(h, attn, p, {})
        answers.length += 1
        return self.output(self._rms(h[:, -1], self.norm)), answers

    def _prefix(self, prompts: list[Tensor], taps: dict | None = None, lean: bool = False) -> tuple[int, KVCache | None]:
        """The length of the prompts' common prefix (leaving each at least one token after it)
        and its keys and values, one row per model, or (0, None) without one.

        The last call's prefix is kept: the part of it this one shares is reused, and only the
        rest is computed. Every decision's prompt opens with the same system prompt and
        intersection description, so they are pre-filled once per decoder, which is once per
        adapter version (:meth:`adapted` makes a new decoder). ``taps`` {"layer": i} receives
        under ``"prefix"`` the hidden states entering layer i at the prefix's positions (of the
        first model), kept with it, or None where a kept part was computed without them."""
        first = prompts[0]
        length = min(len(p) for p in prompts) - 1
        for p in prompts[1:]:
            length = min(length, common_prefix(first, p))
        layer = taps["layer"] if taps is not None else 0
        if lean and self._kept is not None and len(self._kept[0]):
            length = min(length, common_prefix(self._kept[0], first))
        if length < 1:
            if taps is not None:
                taps["prefix"] = self.embed.new_zeros(0, self.embed.shape[1])
            return 0, None
        kept, cache, states, at = self._kept if self._kept is not None else (first[:0], None, None, 0)
        reuse = common_prefix(kept, first[:length])
        states = states[:reuse] if at == layer and states is not None else None
        if layer and states is None:  # kept without these states: computed again, once, with them
            reuse, states = 0, self.embed.new_zeros(0, self.embed.shape[1])
        if not reuse == length == len(kept):
            cache = cache.truncated(reuse, length - reuse) if reuse else None
            if reuse < length:
                rest = first[None, reuse:length].expand(self.models, -1)
                mask = None if cache is None else (torch.arange(length)[None] <= torch.arange(reuse, length)[:, None])
                sub = {"layer": layer} if layer else None
                cache = self._trunk(rest, cache, mask=None if mask is None else mask[None, None], taps=sub)[1]
                states = torch.cat((states, sub["rest"][0])) if states is not None and sub else None
            self._kept = (first[:length], cache, states, layer if states is not None else 0)
        if taps is not None:
            taps["prefix"] = states
        return length, cache


@dataclass
class Prefilled:
    """Prompts pre-filled by :meth:`SmallDecoder.prefill_each`."""

    last: Tensor
    """The final hidden state at each prompt's last position (prompts, hidden)."""
    cache: KVCache
    """Their keys and values, one row per prompt (left-padded after the common prefix)."""
    lengths: Tensor
    """Prompt lengths."""
    padding: Tensor
    """(prompts, keys): 0 for a real key, -inf for padding."""
    taps: dict
    """With ``upto``: the hidden states entering that layer, ``"prefix"`` (the common prefix's,
    or None where it was kept without them) and ``"rest"`` (prompts, width, hidden), prompt r's
    starting at column ``"offset"[r]``, after ``"start"`` prefix positions."""


class _FrozenBelow:
    """Context for a pass over the layers with adapters ``lora`` (per layer, possibly empty):
    :meth:`at` turns gradients off for the layers below the lowest adapted one (frozen weights,
    frozen inputs: no gradient needs their activations) and back on from it; the caller's
    gradient mode is restored on exit."""

    def __init__(self, lora: list | None):
        self.frozen = next((i for i, extra in enumerate(lora) if extra), len(lora)) if lora is not None else 0

    def __enter__(self) -> _FrozenBelow:
        self.grad = torch.is_grad_enabled()
        return self

    def at(self, layer: int) -> None:
        torch.set_grad_enabled(self.grad and layer >= self.frozen)

    def __exit__(self, *exc) -> None:
        torch.set_grad_enabled(self.grad)


def shared_attention(q: Tensor, keys: Tensor, values: Tensor, padding: Tensor, own_keys: Tensor,
                     own_values: Tensor) -> Tensor:
    """Attention of the new positions of each row, ``q`` (rows, heads, new, head_dim), over its
    prompt's keys and values (prompts, kv_heads, length, head_dim), shared by the rows/prompts
    consecutive rows of each prompt, with ``padding`` (prompts, length) added to their scores,
    then over the row's own (rows, kv_heads, steps, head_dim), the last ``new`` of them the new
    positions' (causal among them); one softmax over both, as over the concatenated keys. A
    query head h reads key head h // (heads / kv_heads), as ``enable_gqa`` does."""
    rows, heads, new, dim = q.shape
    prompts, kv_heads, length, _ = keys.shape
    n, group, steps = rows // prompts, heads // kv_heads, own_keys.shape[2]
    scale = dim**-0.5
    # the n rows × group heads × new positions of a prompt and key head query its keys as one matrix
    width = group * new
    shared = (q.reshape(prompts, n, kv_heads, width, dim).transpose(1, 2).reshape(prompts, kv_heads, n * width, dim)
              @ keys.transpose(-1, -2)) * scale + padding[:, None, None]
    shared = shared.view(prompts, kv_heads, n, width, length).transpose(1, 2).reshape(rows, kv_heads, width, length)
    own = (q.reshape(rows, kv_heads, width, dim) @ own_keys.transpose(-1, -2)) * scale
    if new > 1:  # query i sees its own earlier positions only
        later = torch.arange(steps)[None] > steps - new + torch.arange(new)[:, None]
        own = own.masked_fill(later.repeat(group, 1), float("-inf"))
    weights = torch.cat((shared, own), -1).softmax(-1)
    on_prompt, on_own = weights.split([length, steps], -1)
    on_prompt = on_prompt.reshape(prompts, n, kv_heads, width, length).transpose(1, 2).reshape(prompts, kv_heads, n * width, length)
    out = (on_prompt @ values).view(prompts, kv_heads, n, width, dim).transpose(1, 2).reshape(rows, kv_heads, width, dim)
    return (out + on_own @ own_values).reshape(rows, heads, new, dim)


Stop = Callable[[Tensor], Tensor]
"""Given the (rows, steps) tokens sampled so far, which rows end a stop text (bool per row)."""

Constraint = Callable[[Tensor, int], Tensor]
"""Given the (rows, steps) tokens sampled so far and the vocabulary size, an additive mask
(rows, vocab) of the next step's logits (0: allowed, -inf: not), e.g. an answer trie's."""


def common_prefix(a: Tensor, b: Tensor) -> int:
    """Length of the longest common prefix of two 1-D id tensors."""
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if len(differ) else n


def _decode(logits: Tensor, cache: KVCache, max_new_tokens: int, stop_ids: list[int], pad_id: int,
            draw: Callable[[Tensor], Tensor], advance: Callable[[Tensor, int, KVCache], tuple[Tensor, KVCache]],
            stop: Stop | None = None, constraint: Constraint | None = None) -> Tensor:
    """The decoding loop of both samplers: ``draw`` a token per row from ``logits`` (plus the
    ``constraint``'s mask), pad rows that have stopped (a stop token, or a ``stop`` text),
    ``advance`` the cache by the new tokens; (rows, steps) ids."""
    stops = torch.tensor(stop_ids)
    done = torch.zeros(logits.shape[0], dtype=torch.bool)
    out = []
    for step in range(max_new_tokens):
        if constraint is not None:
            so_far = torch.stack(out, 1) if out else torch.zeros(len(logits), 0, dtype=torch.long)
            logits = logits + constraint(so_far, logits.shape[-1])
        token = torch.where(done, torch.full_like(done, pad_id, dtype=torch.long), draw(logits))
        out.append(token)
        ended = torch.isin(token, stops)
        if stop is not None:
            ended |= ~done & stop(torch.stack(out, 1))
        done |= ended
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        logits, cache = advance(token, step, cache)
    return torch.stack(out, 1)


def draw(logits: Tensor, temperature: float, top_p: float, top_k: int,
         generators: list[torch.Generator | None]) -> Tensor:
    """One token per row from :func:`nucleus`'s distribution (argmax at temperature 0); each
    equal block of rows (one per generator) draws its uniforms from its own generator, so a
    block's tokens do not depend on the other rows (inverse CDF: one ``rand`` per block where
    ``torch.multinomial`` cost ~0.1 ms a call here)."""
    if temperature == 0:
        return logits.argmax(-1)
    probs, order = nucleus(logits, temperature, top_p, top_k)
    cdf = probs.cumsum(-1)
    n = len(probs) // len(generators)
    u = torch.cat([torch.rand(n, 1, generator=g) for g in generators]) * cdf[:, -1:]
    pick = torch.searchsorted(cdf, u, right=True).clamp(max=probs.shape[-1] - 1)
    return order.gather(-1, pick)[:, 0]


CANDIDATES = 32
"""Tokens :func:`nucleus` takes by ``topk`` before it sorts the whole vocabulary: sorting 40 rows
of the surrogate's 384 tokens cost ~0.6 ms a step here (a fifth of a decoding step), ``topk``
of 32 about a tenth of that; the sort remains for rows whose top-p mass lies beyond them."""


def nucleus(logits: Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> tuple[Tensor, Tensor]:
    """``generate``'s sampling processors in its order: temperature, top-k (0: off), top-p (1:
    off; the most likely token always stays), as probabilities over the tokens sorted by
    decreasing score, and that order (token ids); the tokens left out of both are removed.
    With neither on, nothing is removed and nothing sorted: the probabilities in token order
    (sorting SmolLM2's 49,152 scores of 8 rows cost 0.12 s a step, more than its forward).
    Removed tokens get probability 0; the others keep their softmax values (not renormalised:
    :func:`draw` scales by their sum).

    Only the likeliest tokens are sorted where they hold all a row can keep: the top-k, or the
    first :data:`CANDIDATES` where their mass reaches ``top_p`` in every row (a token is
    dropped once the tokens likelier than it hold ``top_p``, so none beyond them stays). Ties at
    the k-th score, which ``generate`` keeps all of, keep k of them."""
    scores = logits / temperature
    vocab = scores.shape[-1]
    if top_p >= 1.0 and not top_k:  # nothing removed: the softmax in token order (no sort of the vocabulary)
        return scores.softmax(-1), torch.arange(vocab).expand(len(scores), -1)
    if top_k:
        scores, order = torch.topk(scores, min(top_k, vocab))
        probs = scores.softmax(-1)  # the softmax over the top-k alone is generate's after TopK
    else:
        probs, order = None, None
        if top_p < 1.0 and CANDIDATES < vocab:
            top, order = torch.topk(scores, CANDIDATES)
            probs = (top - scores.logsumexp(-1, keepdim=True)).exp()
            if not bool((probs.sum(-1) >= top_p).all()):
                probs = None
        if probs is None:
            scores, order = torch.sort(scores, descending=True)
            probs = scores.softmax(-1)
    if top_p < 1.0:  # generate drops a token when the mass of tokens no likelier than it is <= 1 - top_p
        probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p, 0.0)
    return probs, order


class KVCache:
    """Keys and values of each layer, (rows, kv_heads, positions, head_dim), in buffers with room
    for more positions: a decoding step writes its keys in place instead of copying the whole
    cache (``torch.cat`` of every layer at every step), growing the buffers when out of room."""

    def __init__(self, layers: list[tuple[Tensor, Tensor]], room: int = 0, n: int = 1):
        """``layers``: (keys, values) per layer; each row repeated ``n`` times in place."""
        self.length = layers[0][0].shape[2]
        self.keys, self.values = [], []
        for k, v in layers:
            self.keys.append(self._buffer(k, room, n))
            self.values.append(self._buffer(v, room, n))

    def _buffer(self, t: Tensor, room: int, n: int) -> Tensor:
        rows, heads, length, dim = t.shape
        out = t.new_empty(rows, n, heads, length + room, dim)
        out[:, :, :, :length] = t[:, None]
        return out.view(rows * n, heads, length + room, dim)

    @classmethod
    def empty(cls, layers: int, rows: int, heads: int, dim: int, room: int) -> KVCache:
        """A cache of no positions yet, with room for ``room``."""
        return cls([(torch.empty(rows, heads, 0, dim), torch.empty(rows, heads, 0, dim))] * layers, room)

    def truncated(self, length: int, room: int) -> KVCache:
        """A new cache of the first ``length`` positions, with room for ``room`` more."""
        return KVCache([(k[:, :, :length], v[:, :, :length]) for k, v in zip(self.keys, self.values)], room)

    def repeated(self, n: int, room: int) -> KVCache:
        """A new cache with each row repeated ``n`` times (consecutive) and room for ``room`` more."""
        return KVCache([(k[:, :, : self.length], v[:, :, : self.length]) for k, v in zip(self.keys, self.values)], room, n)

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new positions' keys and values of ``layer`` after the cached ones; all of
        them so far (views). The caller advances :attr:`length` once every layer is written."""
        end = self.length + k.shape[2]
        if end > self.keys[layer].shape[2]:  # out of room: grow (a caller that did not ask for room)
            grow = end - self.keys[layer].shape[2]
            self.keys[layer] = torch.cat((self.keys[layer], k.new_empty(*k.shape[:2], grow, k.shape[3])), 2)
            self.values[layer] = torch.cat((self.values[layer], v.new_empty(*v.shape[:2], grow, v.shape[3])), 2)
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
