"""``LMPolicy``: a causal LM with LoRA adapters and a value head (OracleTSC §3.2, Alg. 1).

Read top to bottom: the buffer entry (``Exchange``); the rollout, one batched generate of G
answers per decision whose first answer is the action; scoring the rollout (log pi_old,
log pi_ref, V_old); the PPO update (eqs. 5, 6, 16 from :mod:`.objective`); checkpoints.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from .. import constrained, small_decoder
from ..constrained import AnswerTrie
from ..small_decoder import SmallDecoder, common_prefix
from .adapters import MixedAdapters
from .config import PPOConfig
from .model import (StopText, ValueHead, is_4bit, load_policy_model, pad_token_id, shared_prefix_cache,
                    stop_token_ids)
from .objective import (clipped_surrogate_loss, clipped_value_loss, discounted_returns, gae, k3_kl, masked_mean,
                        standardize, token_rewards)


def _adapted(modules) -> bool:
    """Whether peft wrapped these projections with adapters (not with ``lora_layers`` below the top)."""
    return all(hasattr(m, "lora_A") for m in modules)


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
    choices: tuple[str, ...] | None = None
    """Constrained answers (``PPOConfig.answer``): the texts the answer had to be one of; None:
    free text. The update scores the answer under the same mask as the rollout."""
    probs: Tensor | None = None
    """Constrained answers: the exact probability of each of ``choices`` when sampled."""


class LMPolicy:
    """A causal LM with LoRA adapters and a value head, trained by PPO on ``Exchange`` buffers."""

    def __init__(self, model, tokenizer, cfg: PPOConfig):
        from peft import LoraConfig, get_peft_model

        self.cfg, self.tokenizer = cfg, tokenizer
        self.rng = np.random.default_rng(cfg.seed)
        self.stop_ids = stop_token_ids(model, tokenizer)
        self.pad_id = pad_token_id(tokenizer)
        self.stop = StopText(tokenizer, cfg.stop_text) if cfg.stop_text else None
        if cfg.load_in_4bit and not is_4bit(model):
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
        self.merge_sampler = self.device.type == "cpu" and not is_4bit(self.model)
        """Sample from merged weights (see `_sampler`); False applies the adapters unmerged."""
        self._merged: nn.Module | SmallDecoder | None = None
        """The model with the adapters merged in, for sampling on CPU (see `_sampler`)."""
        self._tries: dict[tuple[str, ...], AnswerTrie] = {}
        """Answer tries of constrained answers, one per answer list (built once each)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # --- rollout ---------------------------------------------------------------------

    def sample(self, prompt: str, group_size: int | None = None, rng: np.random.Generator | None = None,
               record: bool = True, choices: Sequence[str] | None = None) -> tuple[list[str], Exchange]:
        """G answers to ``prompt`` in one batched generate call; the first is the action (Alg. 1).

        Returns the decoded answers and the buffer entry of the first one. ``rng`` (default: the
        policy's own generator) seeds the sampling; ``record=False`` keeps the exchange out of
        the next update's scoring (evaluation episodes). ``choices``: the texts a constrained
        answer must be one of (``PPOConfig.answer``; ignored for free answers), drawn from their
        exact distribution (:meth:`choose`).
        """
        g = group_size or self.cfg.group_size
        prompt_ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(self.device)
        seed = int((rng or self.rng).integers(2**62))
        if self.cfg.answer == "constrained":
            trie = self.trie(choices)
            drawn = self.draw_answers([prompt_ids[0].cpu()], trie, [seed], g, states=record)[0]
            return self.constrained_exchange(prompt_ids[0], trie, *drawn, record)
        out = self._generate(prompt_ids, g, seed)
        return self._exchange(prompt_ids[0], out, record)

    # --- constrained answers ---------------------------------------------------------

    def trie(self, choices: Sequence[str] | None) -> AnswerTrie:
        """The answer trie of ``choices`` (built once per list)."""
        if not choices:
            raise ValueError("PPOConfig.answer = 'constrained': give the choices the answer must be one of")
        key = tuple(choices)
        if key not in self._tries:
            self._tries[key] = AnswerTrie(self.tokenizer, key)
        return self._tries[key]

    def choose(self, prompts: list[Tensor], trie: AnswerTrie, sampler: SmallDecoder | nn.Module | None = None,
               upto: int = 0) -> tuple[Tensor, small_decoder.Prefilled | None]:
        """The exact log-probability of each answer of ``trie`` after each prompt (prompts,
        answers) at the config's temperature, top-k and top-p (:func:`constrained.answer_logprobs`),
        and where a :class:`SmallDecoder` samples, the pre-filled prompts (kept with the hidden
        states entering layer ``upto`` > 0, for :meth:`draw_answers`).

        A :class:`SmallDecoder` pre-fills each prompt once (its constant prefix kept between
        calls) and runs the trie's few rows (up to the last node with a choice) over its keys and
        values; elsewhere (GPU, a 4-bit base) the model runs the prompt once and the rows over its cache."""
        cfg, sampler = self.cfg, sampler or self._sampler()
        if isinstance(sampler, SmallDecoder):
            pre = sampler.prefill_each(prompts, self.pad_id, upto)
            hidden = sampler.extend(pre, trie.rows.expand(len(prompts), -1, -1))[0] if len(trie.rows) else None
            logits = constrained.children_logits(trie, pre.last, hidden, sampler.lm_head)
        else:
            pre = None
            logits = torch.stack([self._hf_child_logits(p, trie) for p in prompts])
        return constrained.answer_logprobs(trie, logits.float().cpu(), cfg.temperature, cfg.top_p, cfg.top_k), pre

    def draw_answers(self, prompts: list[Tensor], trie: AnswerTrie, seeds: list[int], g: int, states: bool = False,
                     sampler: SmallDecoder | nn.Module | None = None) -> list[tuple[Tensor, Tensor, Tensor | None]]:
        """Per prompt: the answers' exact log-probabilities (:meth:`choose`), G answer indices
        drawn from them with a generator seeded by ``seeds[i]`` (no decoding; temperature 0: the
        mode G times), and with ``states`` (LoRA on the top layers, a :class:`SmallDecoder`
        sampling) the hidden states entering the lowest adapted layer at the prompt's positions
        and the first answer's, for the update (:attr:`Exchange.states`), else None."""
        sampler = sampler or self._sampler()
        tapped = states and self.frozen > 0 and isinstance(sampler, SmallDecoder)
        logp, pre = self.choose(prompts, trie, sampler, self.frozen if tapped else 0)
        if self.cfg.temperature == 0:
            picks = [lp.argmax().repeat(g) for lp in logp]
        else:
            picks = [constrained.draw(lp, g, torch.Generator().manual_seed(seed)) for lp, seed in zip(logp, seeds)]
        kept = self._tapped_states(sampler, pre, trie, [int(p[0]) for p in picks]) if tapped else [None] * len(prompts)
        return list(zip(logp, picks, kept))

    def _tapped_states(self, sampler: SmallDecoder, pre: small_decoder.Prefilled, trie: AnswerTrie,
                       firsts: list[int]) -> list[Tensor]:
        """Per prompt, the hidden states entering the lowest adapted layer at its positions and
        its first answer's (that answer's tokens run up to that layer only). The last answer
        token's state is never read (it predicts nothing) and stays zero."""
        taps = pre.taps
        seqs = [trie.sequence(f) for f in firsts]
        width = max(len(q) for q in seqs) - 1
        rows = torch.zeros(len(seqs), 1, max(width, 1), dtype=torch.long)
        for r, q in enumerate(seqs):
            rows[r, 0, : len(q) - 1] = q[:-1]
        answers = sampler.extend(pre, rows, self.frozen)[1] if width else None
        out = []
        for r, q in enumerate(seqs):
            rest = taps["rest"][r, int(taps["offset"][r]):]
            tail = torch.zeros(len(q), rest.shape[-1])
            if answers is not None:
                tail[: len(q) - 1] = answers[r, 0, : len(q) - 1]
            out.append(torch.cat((taps["prefix"], rest, tail)))
        return out

    def _hf_child_logits(self, prompt: Tensor, trie: AnswerTrie) -> Tensor:
        """``child_logits`` of one prompt through the (adapter-wrapped) model: the prompt once,
        then the trie's rows over its cache, logits gathered at the trie's children."""
        model, dev = self.model, self.device
        model.eval()
        with torch.no_grad():
            out = model(input_ids=prompt[None].to(dev), use_cache=bool(len(trie.rows)))
            more = None
            if len(trie.rows):
                cache = out.cache
                cache.batch_repeat_interleave(len(trie.rows))
                width = len(prompt) + trie.rows.shape[1]
                more = model(input_ids=trie.rows.to(dev), cache=cache,
                             attention_mask=torch.ones(len(trie.rows), width, dtype=torch.long, device=dev)).logits
        return constrained.gather_children(trie, out.logits[0, -1].float().cpu(),
                                           None if more is None else more.float().cpu())

    def constrained_exchange(self, prompt_ids: Tensor, trie: AnswerTrie, logp: Tensor, picks: Tensor,
                             states: Tensor | None, record: bool) -> tuple[list[str], Exchange]:
        """The answers ``picks`` (indices into ``trie``, drawn from ``exp(logp)``, the first the
        action) and the first one's exchange."""
        answer = trie.sequence(int(picks[0]))
        exchange = Exchange(prompt_ids.cpu(), answer, [trie.answers[int(i)] for i in picks], states=states,
                            choices=trie.answers, probs=logp.exp())
        if record:
            self.pending.append(exchange)
        return exchange.texts, exchange

    def _exchange(self, prompt_ids: Tensor, out: Tensor, record: bool) -> tuple[list[str], Exchange]:
        """The decoded answers (rows of ``out``) to ``prompt_ids`` and the first one's exchange."""
        answers = [self._trim(row) for row in out]
        texts = [self.tokenizer.decode(a, skip_special_tokens=True) for a in answers]
        exchange = Exchange(prompt_ids.cpu(), answers[0].cpu(), texts)
        if record:
            self.pending.append(exchange)
        return texts, exchange

    def sample_each(self, prompts: list[str], rngs: list[np.random.Generator],
                    sampler: SmallDecoder | None = None, choices: Sequence[str] | None = None) -> list[str]:
        """One answer to each prompt, drawn with ``rngs[i]`` as ``sample(prompts[i], 1, rngs[i],
        record=False)`` would draw it, but in one batch where the sampler is a
        :class:`SmallDecoder` (several episodes played together, see
        :func:`llmtraffic.signal.evaluation.evaluate_together`); one call per prompt otherwise.
        ``sampler``: a decoder of several checkpoints (:meth:`checkpoints_decoder`), prompt
        block i answered by checkpoint i. ``choices``: as in :meth:`sample` (one list for all)."""
        if len(prompts) != len(rngs):
            raise ValueError(f"sample_each: {len(prompts)} prompts for {len(rngs)} generators")
        if isinstance(sampler, MixedAdapters):  # generate's path: one batch, an adapter per block
            return sampler.sample_each(prompts, rngs)
        sampler = sampler or self._sampler()
        if not isinstance(sampler, SmallDecoder) or (len(prompts) == 1 and sampler.models == 1):
            return [self.sample(p, 1, rng=rng, record=False, choices=choices)[0][0] for p, rng in zip(prompts, rngs)]
        cfg, tok = self.cfg, self.tokenizer
        ids = [tok(p, return_tensors="pt", add_special_tokens=False).input_ids[0] for p in prompts]
        seeds = [int(rng.integers(2**62)) for rng in rngs]
        if cfg.answer == "constrained":
            trie = self.trie(choices)
            drawn = self.draw_answers(ids, trie, seeds, 1, sampler=sampler)
            return [self.constrained_exchange(q, trie, *d, False)[0][0] for q, d in zip(ids, drawn)]
        gens = [torch.Generator().manual_seed(seed) for seed in seeds]
        out = sampler.sample_each(ids, cfg.max_new_tokens, self.stop_ids, self.pad_id, cfg.temperature, cfg.top_p,
                                  cfg.top_k, gens, stop=self.stop)
        return [tok.decode(self._trim(row), skip_special_tokens=True) for row in out]

    def sample_groups(self, prompts: list[str], rng: np.random.Generator, chunk: int = 64,
                      choices: Sequence[str] | None = None) -> list[list[str]]:
        """G answers to each prompt, as ``[sample(p, rng=rng, record=False)[0] for p in prompts]``
        draws them (one generator seed per prompt from ``rng``, in order), but ``chunk`` prompts per
        batch where the sampler is a :class:`SmallDecoder`: the evaluation's agreement probes,
        ~6x cheaper than one call per prompt (each prompt pre-filled once, its G rows decoded together).
        ``choices``: as in :meth:`sample`."""
        if chunk < 1:
            raise ValueError(f"sample_groups: chunk must be >= 1, got {chunk}")
        sampler = self._sampler()
        if not isinstance(sampler, SmallDecoder):
            return [self.sample(p, rng=rng, record=False, choices=choices)[0] for p in prompts]
        cfg, tok, g = self.cfg, self.tokenizer, self.cfg.group_size
        seeds = [int(rng.integers(2**62)) for _ in prompts]
        texts: list[list[str]] = []
        for start in range(0, len(prompts), chunk):
            block = prompts[start : start + chunk]
            ids = [tok(p, return_tensors="pt", add_special_tokens=False).input_ids[0] for p in block]
            if cfg.answer == "constrained":
                trie = self.trie(choices)
                drawn = self.draw_answers(ids, trie, seeds[start : start + chunk], g, sampler=sampler)
                texts += [self.constrained_exchange(q, trie, *d, False)[0] for q, d in zip(ids, drawn)]
                continue
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
            cache = shared_prefix_cache(sampler, prompt_ids, g)
            torch.manual_seed(seed)  # generate draws from torch's global RNG
            out = sampler.generate(
                input_ids=prompt_ids.repeat(g, 1),
                attention_mask=torch.ones(g, prompt_ids.shape[1], dtype=torch.long, device=self.device),
                cache=cache,
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

    def checkpoints_decoder(self, checkpoints: list[str | Path]) -> SmallDecoder | MixedAdapters:
        """One :class:`SmallDecoder` over the merged weights of each checkpoint, side by side
        (for playing them together; leaves the policy loaded with the last checkpoint), or where
        this policy samples through ``generate`` their adapters side by side in its peft model
        (:class:`MixedAdapters`; ``close()`` removes them)."""
        if not self.merge_sampler or self._reference is None:
            return MixedAdapters(self, checkpoints)
        decoders = []
        for path in checkpoints:
            self.load(path)
            decoders.append(self._sampler())
        return SmallDecoder.stack(decoders)

    def decoding(self) -> tuple:
        """What two policies must share to sample in one batch: the decoding settings and tokens."""
        cfg = self.cfg
        return (cfg.max_new_tokens, cfg.temperature, cfg.top_p, cfg.top_k, tuple(self.stop_ids), self.pad_id,
                cfg.stop_text, cfg.answer)

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
        size = self.cfg.micro_batch_size or self.cfg.minibatch_size  # the update's memory bound holds here too
        with torch.no_grad():
            for start in range(0, len(self.pending), size):
                batch = self.pending[start : start + size]
                prompts, answers = [e.prompt_ids for e in batch], [e.answer_ids for e in batch]
                tries = [self.trie(e.choices) if e.choices else None for e in batch]
                if fast:  # the frozen layers once for both: the policy and pi_ref differ above them only
                    if self.frozen and all(e.states is not None for e in batch):  # kept from the rollout
                        states = nn.utils.rnn.pad_sequence([e.states for e in batch], batch_first=True)
                    else:
                        states = self._states(prompts, answers) if self.frozen else None
                    logp, values, _ = self._evaluate(prompts, answers, sampler, states=states, tries=tries)
                    ref_logp, _, _ = self._evaluate(prompts, answers, self._reference, states=states, tries=tries)
                    for row, ex in enumerate(batch if states is not None else []):
                        ex.states = states[row, : len(ex.prompt_ids) + len(ex.answer_ids)].clone()
                else:
                    logp, values, _ = self._evaluate(prompts, answers, tries=tries)
                    with self.model.disable_adapter():  # pi_ref: the same base without adapters
                        ref_logp, _, _ = self._evaluate(prompts, answers, tries=tries)
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
                  lora: list | None = None, states: Tensor | None = None,
                  tries: list[AnswerTrie | None] | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Log-probabilities and values at each answer token of a right-padded batch, computed
        by the adapter-wrapped model or by ``decoder`` (with the low-rank factors ``lora``, see
        :meth:`_factors`; from ``states``, the hidden states entering the lowest adapted layer,
        where given). ``tries``: per row, the answer trie of a constrained answer (its
        log-probabilities are the masked conditionals of the rollout), or None (free text).

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
            # no KV cache: a training forward never reads one, and it would hold every layer's keys and values
            hidden = base.get_decoder()(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
            head = base.get_output_embeddings()
        else:  # the prompts' common prefix (system prompt, intersection) computed once per batch
            hidden = decoder.hidden(ids, lora, shared, states, self.frozen if states is not None else 0)
            head = decoder.output
        h = hidden.gather(1, pos[..., None].expand(-1, -1, hidden.shape[-1]))
        logits = head(h).float() / (self.cfg.temperature or 1.0)
        if tries is not None and any(t is not None for t in tries):
            logits = logits + self._answer_masks(answers, tries, logits.shape[1], logits.shape[2]).to(dev)
        targets = ids.gather(1, pos + 1)
        logp = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1) * mask
        # The critic reads detached features: its loss trains the value head only, so the two
        # optimisers of A.2 each own their parameters.
        values = self.value_head(h.detach().float()) * mask
        return logp, values, mask

    @staticmethod
    def _answer_masks(answers: list[Tensor], tries: list[AnswerTrie | None], steps: int, vocab: int) -> Tensor:
        """Additive masks (batch, steps, vocab) of the rows' answer tries (0 for free answers and
        past an answer's end)."""
        out = torch.zeros(len(answers), steps, vocab)
        for row, (answer, trie) in enumerate(zip(answers, tries)):
            if trie is not None:
                out[row, : len(answer)] = trie.mask_answer(answer.cpu(), vocab)
        return out

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
        """One gradient step on a minibatch, in micro-batches of ``micro_batch_size`` exchanges whose
        gradients accumulate: the advantages are standardised and every token mean is taken over the
        whole minibatch (``count``), so the step is the minibatch's own (eqs. 5, 6, 16)."""
        cfg, dev = self.cfg, self.device

        def padded(ts: list[Tensor]) -> Tensor:
            return nn.utils.rnn.pad_sequence(ts, batch_first=True).to(dev)

        old_logp, ref_logp, old_values = (padded([getattr(e, k) for e in batch]) for k in ("old_logp", "ref_logp", "old_values"))
        adv, returns = padded([a for a, _ in targets]), padded([r for _, r in targets])
        lengths = torch.tensor([len(e.answer_ids) for e in batch], device=dev)
        mask = (torch.arange(adv.shape[1], device=dev)[None] < lengths[:, None]).float()
        count = mask.sum().clamp(min=1)
        if cfg.standardize_advantages:
            adv = standardize(adv, mask)
        self.actor_opt.zero_grad()
        self.critic_opt.zero_grad()
        size = cfg.micro_batch_size or len(batch)
        sums = {"policy_loss": 0.0, "value_loss": 0.0, "clip": 0.0, "kl": 0.0}
        for start in range(0, len(batch), size):
            part = batch[start : start + size]
            rows = slice(start, start + len(part))
            decoder, lora = self._trainer()  # the factors' graph is freed by each backward
            states = (nn.utils.rnn.pad_sequence([e.states for e in part], batch_first=True)
                      if decoder is not None and all(e.states is not None for e in part) else None)
            logp, values, m = self._evaluate([e.prompt_ids for e in part], [e.answer_ids for e in part], decoder, lora,
                                             states, [self.trie(e.choices) if e.choices else None for e in part])
            cut = (rows, slice(0, m.shape[1]))  # the micro-batch pads to its own longest answer
            policy_loss = clipped_surrogate_loss(logp, old_logp[cut], adv[cut], cfg.clip_low, cfg.clip_high, m, count)
            loss = policy_loss
            if cfg.use_critic:
                value_loss = clipped_value_loss(values, old_values[cut], returns[cut], cfg.value_clip, m, count)
                loss = policy_loss + cfg.value_coef * value_loss  # eq. 6
                sums["value_loss"] += value_loss.item()
            loss.backward()
            with torch.no_grad():
                ratio = torch.exp(logp - old_logp[cut])
                outside = ((ratio < 1 - cfg.clip_low) | (ratio > 1 + cfg.clip_high)).float()
                sums["policy_loss"] += policy_loss.item()
                sums["clip"] += masked_mean(outside, m, count).item()
                sums["kl"] += masked_mean(k3_kl(logp, ref_logp[cut]), m, count).item()
        nn.utils.clip_grad_norm_(self.actor_params, cfg.actor_max_grad_norm)
        self.actor_opt.step()
        self._merged = None  # the adapters changed
        if cfg.use_critic:
            nn.utils.clip_grad_norm_(self.value_head.parameters(), cfg.critic_max_grad_norm)
            self.critic_opt.step()
            stats["value_loss"].append(sums["value_loss"])
        stats["policy_loss"].append(sums["policy_loss"])
        stats["clip_frac"].append(sums["clip"])
        stats["kl"].append(sums["kl"])

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
