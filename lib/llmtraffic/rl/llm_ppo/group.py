"""``PolicyGroup``: the agent seeds of a table row sampling in one batch."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..small_decoder import SmallDecoder
from .policy import Exchange, LMPolicy


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

    def sample(self, prompts: list[str], group_size: int | None = None,
               choices: Sequence[str] | None = None) -> list[tuple[list[str], Exchange]]:
        """``policies[i].sample(prompts[i], group_size, choices=choices)`` for every i, recorded for
        their updates (constrained answers: each policy's exact distribution from one stacked
        forward, :meth:`LMPolicy.choose`)."""
        if len(prompts) != len(self.policies):
            raise ValueError(f"PolicyGroup.sample: {len(prompts)} prompts for {len(self.policies)} policies")
        sizes = {group_size or p.cfg.group_size for p in self.policies}
        decoder = self.decoder() if len(self.policies) > 1 and len(sizes) == 1 else None
        if decoder is None:
            return [p.sample(q, group_size, choices=choices) for p, q in zip(self.policies, prompts)]
        first, g = self.policies[0], sizes.pop()
        cfg = first.cfg
        ids = [first.tokenizer(q, return_tensors="pt", add_special_tokens=False).input_ids[0] for q in prompts]
        if cfg.answer == "constrained":
            seeds = [int(p.rng.integers(2**62)) for p in self.policies]
            drawn = first.draw_answers(ids, first.trie(choices), seeds, g, states=True, sampler=decoder)
            return [p.constrained_exchange(q, p.trie(choices), *d, True) for p, q, d in zip(self.policies, ids, drawn)]
        gens = [torch.Generator().manual_seed(int(p.rng.integers(2**62))) for p in self.policies]
        out = decoder.sample_each(ids, cfg.max_new_tokens, first.stop_ids, first.pad_id, cfg.temperature, cfg.top_p,
                                  cfg.top_k, gens, n=g, stop=first.stop)
        return [p._exchange(q, out[g * i : g * i + g], record=True) for i, (p, q) in enumerate(zip(self.policies, ids))]
