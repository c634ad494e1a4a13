"""Several checkpoints (or seeds) of one policy answering in one ``generate`` call: their LoRA
adapters loaded side by side into the policy's peft model, each row decoded with its own
adapter (peft's mixed-adapter batches, ``generate(adapter_names=...)``).

This is how held-out checkpoint selection and evaluation batch where the policy samples through
``generate`` (a GPU, or a 4-bit base): 20 checkpoints of a fine-tune play their held-out episode
in one batch per decision instead of one after the other. On the CPU, where
:class:`~llmtraffic.rl.small_decoder.SmallDecoder` runs the merged weights, stacked decoders do
the same (:meth:`LMPolicy.checkpoints_decoder`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

DEFAULT = "default"
"""peft's name of the adapters being trained."""


class MixedAdapters:
    """The adapters of ``checkpoints`` (None: the policy's current ones) loaded into ``policy``'s
    peft model under names of their own; prompt block i is answered by checkpoint i."""

    def __init__(self, policy, checkpoints: Sequence[str | Path] | None = None):
        from peft import set_peft_model_state_dict

        self.policy, self.names = policy, []
        model = policy.model
        for k, path in enumerate(checkpoints or []):
            name = f"candidate{k}"
            if name not in model.peft_config:
                model.add_adapter(name, model.peft_config[DEFAULT])
            set_peft_model_state_dict(model, torch.load(path, weights_only=False)["adapters"], adapter_name=name)
            self.names.append(name)
        model.set_adapter(DEFAULT)  # training and the default decoding stay on the policy's own adapters
        self.names = self.names or [DEFAULT]

    @property
    def models(self) -> int:
        return len(self.names)

    def sample_each(self, prompts: list[str], rngs: list[np.random.Generator]) -> list[str]:
        """One answer to each prompt in one left-padded ``generate``, block i of the prompts by
        adapter i. The rows share torch's generator, seeded by one draw from every ``rngs[i]``
        (the same seeds give the same answers; not those of one call per prompt)."""
        policy, cfg = self.policy, self.policy.cfg
        if len(prompts) % self.models:
            raise ValueError(f"MixedAdapters: {len(prompts)} prompts do not split into {self.models} equal blocks")
        tok, dev = policy.tokenizer, policy.device
        ids = [tok(p, return_tensors="pt", add_special_tokens=False).input_ids[0] for p in prompts]
        width = max(len(i) for i in ids)
        batch = torch.full((len(ids), width), policy.pad_id, dtype=torch.long)
        mask = torch.zeros_like(batch)
        for row, seq in enumerate(ids):  # left padding: every answer starts at the same column
            batch[row, width - len(seq):], mask[row, width - len(seq):] = seq, 1
        seed = int(np.random.default_rng([int(r.integers(2**62)) for r in rngs]).integers(2**62))
        per = len(prompts) // self.models
        sampling = (dict(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k)
                    if cfg.temperature > 0 else dict(do_sample=False))
        policy.model.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=policy._rng_devices()):
            torch.manual_seed(seed)
            out = policy.model.generate(
                input_ids=batch.to(dev), attention_mask=mask.to(dev), max_new_tokens=cfg.max_new_tokens,
                pad_token_id=policy.pad_id, eos_token_id=policy.stop_ids,
                adapter_names=[name for name in self.names for _ in range(per)],
                **(dict(stop_strings=[cfg.stop_text], tokenizer=tok) if cfg.stop_text else {}), **sampling)
        return [tok.decode(policy._trim(row), skip_special_tokens=True) for row in out[:, width:]]

    def close(self) -> None:
        """Remove the candidates' adapters (the policy keeps its own)."""
        for name in self.names:
            if name != DEFAULT:
                self.policy.model.delete_adapter(name)
        self.policy.model.set_adapter(DEFAULT)
        self.names = [DEFAULT]

