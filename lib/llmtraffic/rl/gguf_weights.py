"""A GGUF model as a transformers folder: dequantized once, cached as safetensors.

``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)`` dequantizes a GGUF file to fp32
(SmolLM2-135M: ~22 s here), and a model loaded that way refuses ``save_pretrained``. So the
first load builds a fresh model from the GGUF's config, loads the dequantized state dict into
it and saves that, with the tokenizer (and its chat template), under
``<runs>/models/hf-<sha256 of the GGUF>``; every later load reads the folder (a few seconds).
The folder is an ordinary Hugging Face folder: the policy loader
(:func:`llmtraffic.rl.llm_ppo.load_policy_model`) reads it, in 4-bit if asked.

Names resolve through the model registry (:mod:`llmtraffic.llm.models`): ``smollm2-135m``,
``qwen2.5-coder-1.5b``, or a path to any ``.gguf`` file of a Llama- or Qwen2-family model.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

from ..llm import models
from ..paths import runs_dir
from ..study.atomic import folder_lock

DONE = "llmtraffic-gguf.txt"
"""Written last into a cached folder (the GGUF's sha256): a folder without it is incomplete."""


def is_gguf_model(name: str) -> bool:
    """Whether ``name`` is a registered model or a path to a ``.gguf`` file."""
    return name in models.MODELS or str(name).endswith(".gguf")


def gguf_sha256(name: str) -> str:
    """The sha256 of a registered model (verified by :func:`models.gguf_path`) or of a file."""
    return models.MODELS[name].sha256 if name in models.MODELS else models.sha256_file(models.gguf_path(name))


def hf_folder(name: str, cache_dir: Path | None = None) -> Path:
    """The transformers folder of a registered model or ``.gguf`` path, built once (see module).

    Processes asking at once (a notebook's workers, two notebooks) convert one at a time under a
    lock on the cache folder: the others wait and then read the finished folder, which is never
    replaced once complete (a reader would find it half-deleted)."""
    gguf = models.gguf_path(name)
    sha = gguf_sha256(name)
    out = Path(cache_dir or runs_dir() / "models") / f"hf-{sha[:16]}"
    if _complete(out, sha):
        return out
    with folder_lock(out.parent):
        if _complete(out, sha):
            return out
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        _convert(gguf, tmp)
        (tmp / DONE).write_text(sha + "\n")
        shutil.rmtree(out, ignore_errors=True)  # an incomplete folder of an interrupted conversion
        tmp.replace(out)
    return out


def _complete(folder: Path, sha: str) -> bool:
    return (folder / DONE).is_file() and (folder / DONE).read_text().strip() == sha


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` through transformers and save it as safetensors with its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = dict(pretrained_model_name_or_path=str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(**source)
    # save_pretrained refuses a GGUF-loaded model; a model built from its config does not. The
    # config's GGUF "quantization" describes the file, not the saved fp32 weights.
    config, generation = copy.deepcopy(loaded.config), loaded.generation_config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # built on the meta device and given the loaded tensors themselves (assign): a second fp32 copy
    # of a 1.5B model (6 GB) beside the first is what ran the machine out of memory
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False, assign=True)
    del loaded
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"{gguf.name}: the dequantized weights do not fit the model its config describes "
                         f"(missing {sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]})")
    fresh.tie_weights()
    fresh.generation_config = generation
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)


def load(name: str, dtype=None):
    """(model, tokenizer) of a registered model or ``.gguf`` path, from the cached folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = hf_folder(name)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype or torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(folder)
