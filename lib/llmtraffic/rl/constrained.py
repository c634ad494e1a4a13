"""Answers constrained to a fixed set of texts (e.g. a signal's phase names and the closing tag):
the token trie, its mask, and the exact distribution over the answers.

A policy whose answer must be one of a few texts (``PPOConfig.answer = "constrained"``) may
draw, after its prompt, only token sequences that spell one of them. :class:`AnswerTrie` holds
their tokenizations as a trie, built once per tokenizer and answer list: at each node, the
tokens that continue some answer. An answer that is a token-prefix of another (``NT`` and
``NTST`` before the closing tag) branches where they part.

Three ways to use it, one distribution:

- masked decoding: :meth:`AnswerTrie.mask` on the logits of each step, for
  :class:`~llmtraffic.rl.small_decoder.SmallDecoder`'s loop and, as :class:`TrieLogitsProcessor`,
  for Hugging Face ``generate`` (the GPU path);
- the exact distribution (:func:`answer_logprobs`): the probability of every answer, the product
  of the masked conditionals along its path, from one forward of the answers' rows over the
  prompt's keys and values; the G answers of a decision are then drawn from it without decoding;
- scoring (:meth:`AnswerTrie.mask_answer`): the PPO update's log-probabilities under the same mask.

The masked conditional at a node is the softmax, at the sampling temperature, over the node's
children only. A node with one child contributes probability 1 (log 0): such tokens carry no
choice, and the answers' rows need no forward beyond their last branching node for the
distribution (they run to the end so that the chosen answer's hidden states are at hand for
the update).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .small_decoder import nucleus


class AnswerTrie:
    """The token sequences of ``answers`` (tokenized without special tokens) as a trie.

    ``ids`` (answers, longest) right-padded with 0 and ``lengths``; ``children`` (answers,
    longest, width) the tokens allowed at each answer position (the node reached by the answer's
    tokens before it; -1 pads) and ``target`` (answers, longest) the index of the answer's own
    token among them (-1 past its end)."""

    def __init__(self, tokenizer, answers: Sequence[str]):
        self.answers = tuple(answers)
        if not self.answers or len(set(self.answers)) != len(self.answers):
            raise ValueError(f"AnswerTrie: answers must be distinct and not empty, got {list(answers)}")
        seqs = [tuple(tokenizer(a, add_special_tokens=False).input_ids) for a in self.answers]
        if any(not s for s in seqs):
            raise ValueError(f"AnswerTrie: an answer has no tokens: {list(answers)}")
        for a, s in zip(self.answers, seqs):
            for b, t in zip(self.answers, seqs):
                if a != b and len(s) < len(t) and t[: len(s)] == s:
                    raise ValueError(f"AnswerTrie: answer {a!r} is a whole token-prefix of {b!r}, so the trie "
                                     "cannot tell where it ends; end every answer with a closing text (a tag)")
        self.seqs = seqs
        nodes: dict[tuple[int, ...], list[int]] = {}
        for s in seqs:
            for j in range(len(s)):
                kids = nodes.setdefault(s[:j], [])
                if s[j] not in kids:
                    kids.append(s[j])
        self.nodes = {k: sorted(v) for k, v in nodes.items()}
        """Every proper prefix of an answer → the tokens that continue it (sorted)."""
        longest, width = max(map(len, seqs)), max(map(len, self.nodes.values()))
        self.lengths = torch.tensor([len(s) for s in seqs])
        self.ids = torch.zeros(len(seqs), longest, dtype=torch.long)
        self.children = torch.full((len(seqs), longest, width), -1, dtype=torch.long)
        self.target = torch.full((len(seqs), longest), -1, dtype=torch.long)
        for a, s in enumerate(seqs):
            self.ids[a, : len(s)] = torch.tensor(s)
            for j in range(len(s)):
                kids = self.nodes[s[:j]]
                self.children[a, j, : len(kids)] = torch.tensor(kids)
                self.target[a, j] = kids.index(s[j])
        self._branch_rows()

    def _branch_rows(self) -> None:
        """``rows`` (rows, length): the fewest token rows whose hidden states give the logits at
        every node with a choice below the root (each answer up to its last such node, those that
        are prefixes of others dropped); ``source`` (answers, longest): where answer position j's
        logits come from, -1 for the prompt's last position (the root, and every position with one
        child, whose conditional is 1 whatever the logits), else the flat index row·length + column."""
        needed = []
        for s in self.seqs:
            last = max((j for j in range(1, len(s)) if len(self.nodes[s[:j]]) > 1), default=0)
            needed.append(s[:last])
        rows = sorted({r for r in needed if r and not any(len(o) > len(r) and o[: len(r)] == r for o in needed)})
        width = max(map(len, rows), default=0)
        self.rows = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            self.rows[i, : len(r)] = torch.tensor(r)
        self.source = torch.full(self.target.shape, -1, dtype=torch.long)
        for a, s in enumerate(self.seqs):
            for j in range(1, len(s)):
                if len(self.nodes[s[:j]]) > 1:
                    row = next(i for i, r in enumerate(rows) if r[:j] == s[:j])
                    self.source[a, j] = row * width + j - 1

    def __len__(self) -> int:
        return len(self.answers)

    def sequence(self, answer: int) -> Tensor:
        """The token ids of answer ``answer`` (its index)."""
        return self.ids[answer, : int(self.lengths[answer])]

    def allowed(self, prefix: Sequence[int], stop_ids: Sequence[int] = ()) -> list[int]:
        """Tokens allowed after the answer tokens ``prefix``: the node's children; after a whole
        answer (or off the trie), ``stop_ids`` only."""
        return self.nodes.get(tuple(prefix), list(stop_ids))

    def mask(self, prefixes: Sequence[Sequence[int]], vocab: int, stop_ids: Sequence[int] = ()) -> Tensor:
        """Additive mask (rows, vocab): 0 where a row with answer tokens ``prefixes[row]`` may go
        next, -inf elsewhere (a whole answer may only stop)."""
        out = torch.full((len(prefixes), vocab), float("-inf"))
        for row, prefix in enumerate(prefixes):
            out[row, self.allowed(prefix, stop_ids)] = 0.0
        return out

    def mask_answer(self, answer: Tensor, vocab: int) -> Tensor:
        """Additive mask (len(answer), vocab) of each step of one answer (the PPO scoring's): 0
        at the tokens the node before the step allows."""
        prefix = answer.tolist()
        return self.mask([prefix[:j] for j in range(len(prefix))], vocab)


def answer_logprobs(trie: AnswerTrie, child_logits: Tensor, temperature: float = 1.0, top_p: float = 1.0,
                    top_k: int = 0) -> Tensor:
    """Log-probability of every answer (prompts, answers) from ``child_logits`` (prompts,
    answers, longest, width): the logits of ``trie.children`` at each answer position (any
    value where a child is -1).

    Each position's masked conditional is the softmax of its children's logits at
    ``temperature`` (then ``top_k`` and ``top_p`` among them, as the samplers apply them, and
    renormalised); an answer's log-probability is the sum over its positions. Temperature 0:
    probability 1 for the most likely answer at temperature 1 (the mode, not greedy decoding)."""
    valid = trie.children >= 0
    logits = child_logits.masked_fill(~valid, float("-inf"))
    if temperature == 0:
        best = answer_logprobs(trie, child_logits, 1.0).argmax(-1)
        return torch.full(best.shape + (len(trie),), float("-inf")).scatter(-1, best[..., None], 0.0)
    if top_p >= 1.0 and not top_k:
        logp = torch.log_softmax(logits / temperature, -1)
    else:
        shape = logits.shape
        probs, order = nucleus(logits.reshape(-1, shape[-1]), temperature, top_p, top_k)
        kept = torch.zeros_like(probs).scatter(-1, order, probs).view(shape)
        logp = torch.log(kept / kept.sum(-1, keepdim=True))
    steps = trie.target >= 0
    picked = logp.gather(-1, trie.target.clamp(min=0)[None, ..., None].expand(len(logp), -1, -1, 1)).squeeze(-1)
    return torch.where(steps, picked, torch.zeros(())).sum(-1)


def draw(logp: Tensor, n: int, generator: torch.Generator | None) -> Tensor:
    """``n`` answer indices from the distribution ``exp(logp)`` (answers,), with replacement."""
    return torch.multinomial(logp.exp(), n, replacement=True, generator=generator)


def children_logits(trie: AnswerTrie, last: Tensor, hidden: Tensor | None, head: Tensor) -> Tensor:
    """``child_logits`` of :func:`answer_logprobs` from final hidden states: ``last`` (prompts,
    hidden) at each prompt's last position and ``hidden`` (prompts, rows, length, hidden) at
    ``trie.rows`` after it (None without rows), and the LM head's weight (vocab, hidden). Only
    the children's rows of the head are multiplied: the trie's tokens, not the vocabulary."""
    flat = last[:, None] if hidden is None else torch.cat((last[:, None], hidden.flatten(1, 2)), 1)
    states = flat[:, trie.source + 1]  # (prompts, answers, longest, hidden)
    weights = head[trie.children.clamp(min=0)]  # (answers, longest, width, hidden)
    return torch.einsum("pajh,ajkh->pajk", states.to(weights.dtype), weights)


def gather_children(trie: AnswerTrie, last: Tensor, more: Tensor | None) -> Tensor:
    """``child_logits`` of one prompt from full logits: ``last`` (vocab,) after the prompt and
    ``more`` (rows, length, vocab) at ``trie.rows`` (or None)."""
    flat = last[None] if more is None else torch.cat((last[None], more.flatten(0, 1)))
    return flat[trie.source + 1].gather(-1, trie.children.clamp(min=0))


class TrieLogitsProcessor:
    """A transformers ``LogitsProcessor`` (``generate``'s GPU path) that keeps each row on the
    trie: after the prompt (``prompt_length`` tokens), only tokens continuing an answer; after a
    whole answer, the ``stop_ids``."""

    def __init__(self, trie: AnswerTrie, prompt_length: int, stop_ids: Sequence[int]):
        self.trie, self.prompt_length, self.stop_ids = trie, prompt_length, list(stop_ids)

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        mask = self.trie.mask(input_ids[:, self.prompt_length:].tolist(), scores.shape[-1], self.stop_ids)
        return scores + mask.to(scores.device, scores.dtype)
