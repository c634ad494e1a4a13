"""The `openai` backend against a real chat-completions server on loopback."""

import time

import pytest

from llmtraffic import llm

HELLO = [{"role": "system", "content": "You control buses."}, {"role": "user", "content": "Hold?"}]


def test_429_then_200_is_retried_and_sends_the_request(chat_server, openai_cfg):
    chat_server.script = [(429, {"error": "slow down"}, 0), (200, chat_server.completion("hold 30"), 0)]
    model = llm.from_config(openai_cfg)
    assert model.complete(HELLO, temperature=0.5, max_tokens=64, seed=3) == ["hold 30"]
    assert len(chat_server.requests) == 2
    sent = chat_server.requests[1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == "Bearer sk-test"
    assert sent["body"] == {
        "model": "test-model", "messages": HELLO, "n": 1, "temperature": 0.5, "max_tokens": 64, "seed": 3,
    }
    usage = model.usage()
    assert (usage.calls, usage.live_calls, usage.prompt_tokens, usage.completion_tokens) == (1, 1, 11, 5)


def test_retry_after_header_is_a_lower_bound_on_the_wait(chat_server, openai_cfg):
    chat_server.script = [(429, "busy", 0, {"Retry-After": "0.4"}), (200, chat_server.completion("ok"), 0)]
    start = time.perf_counter()
    assert llm.from_config(openai_cfg).complete(HELLO) == ["ok"]
    assert time.perf_counter() - start >= 0.4  # backoff_s is 0.01: only the header explains the wait


def test_5xx_until_retries_run_out_names_the_status(chat_server, openai_cfg):
    chat_server.script = [(503, "overloaded", 0)]
    with pytest.raises(llm.LLMError, match="HTTP 503 after 3 attempts: overloaded"):
        llm.from_config(openai_cfg).complete(HELLO)
    assert len(chat_server.requests) == 3  # first try + max_retries=2


def test_timeout_is_retried(chat_server, openai_cfg):
    chat_server.script = [(200, chat_server.completion("late"), 1.0), (200, chat_server.completion("fast"), 0)]
    answer = llm.from_config(openai_cfg | {"timeout_s": 0.2}).complete(HELLO)
    assert answer == ["fast"]
    assert len(chat_server.requests) == 2


def test_timeouts_until_retries_run_out_name_the_timeout(chat_server, openai_cfg):
    chat_server.script = [(200, chat_server.completion("late"), 0.6)]
    with pytest.raises(llm.LLMError, match=r"ReadTimeout .* after 3 attempts \(timeout_s=0.2\)"):
        llm.from_config(openai_cfg | {"timeout_s": 0.2}).complete(HELLO)


def test_connection_refused_is_retried_then_reported(chat_server, openai_cfg):
    url = chat_server.url
    chat_server.close()
    with pytest.raises(llm.LLMError, match="ConnectError .* after 3 attempts"):
        llm.from_config(openai_cfg | {"base_url": url}).complete(HELLO)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<html>gateway</html>", "not JSON: '<html>gateway</html>'"),
        ({"object": "chat.completion"}, "no 'choices' list"),
        ({"choices": [{"message": {"role": "assistant"}}]}, r"choices\[0\].message.content is not a string"),
        ("[1, 2]", "JSON that is not an object"),
    ],
)
def test_malformed_body_is_a_clear_error_without_retry(chat_server, openai_cfg, body, message):
    chat_server.script = [(200, body, 0)]
    with pytest.raises(llm.LLMResponseError, match=message):
        llm.from_config(openai_cfg).complete(HELLO)
    assert len(chat_server.requests) == 1


def test_401_names_the_key_variable_without_retry(chat_server, openai_cfg):
    chat_server.script = [(401, {"error": {"message": "Incorrect API key"}}, 0)]
    with pytest.raises(llm.LLMAuthError, match="check the variable LLMTRAFFIC_TEST_KEY .*Incorrect API key"):
        llm.from_config(openai_cfg).complete(HELLO)
    assert len(chat_server.requests) == 1


def test_401_without_a_key_variable_says_to_set_api_key_env(chat_server, openai_cfg):
    chat_server.script = [(401, {"error": {"message": "Missing API key"}}, 0)]
    cfg = {k: v for k, v in openai_cfg.items() if k != "api_key_env"}
    with pytest.raises(llm.LLMAuthError, match=r"HTTP 401\) and no API key was sent: set api_key_env to the name "
                                               r"of the environment variable that holds the key.*Missing API key"):
        llm.from_config(cfg).complete(HELLO)
    assert len(chat_server.requests) == 1


@pytest.mark.parametrize(("usage", "message"), [
    ({"prompt_tokens": None, "completion_tokens": 5}, r"usage.prompt_tokens is None, not a token count"),
    ({"prompt_tokens": 3, "completion_tokens": "5"}, r"usage.completion_tokens is '5', not a token count"),
    ("lots", r"'usage' is 'lots', not an object of token counts"),
])
def test_malformed_usage_is_named(chat_server, openai_cfg, usage, message):
    chat_server.script = [(200, chat_server.completion("x") | {"usage": usage}, 0)]
    with pytest.raises(llm.LLMResponseError, match=message):
        llm.from_config(openai_cfg).complete(HELLO)


def test_absent_usage_counts_zero_tokens(chat_server, openai_cfg):
    body = chat_server.completion("x")
    del body["usage"]
    chat_server.script = [(200, body, 0)]
    model = llm.from_config(openai_cfg)
    assert model.complete(HELLO) == ["x"] and model.usage().total_tokens == 0


def test_404_names_model_and_url(chat_server, openai_cfg):
    chat_server.script = [(404, {"error": "model not found"}, 0)]
    with pytest.raises(llm.LLMNotFoundError, match="model 'test-model' not found"):
        llm.from_config(openai_cfg).complete(HELLO)


def test_missing_key_variable_fails_before_any_request(chat_server, openai_cfg, monkeypatch):
    monkeypatch.delenv("LLMTRAFFIC_TEST_KEY")
    with pytest.raises(llm.LLMAuthError, match="LLMTRAFFIC_TEST_KEY"):
        llm.from_config(openai_cfg).complete(HELLO)
    assert chat_server.requests == []


def test_server_ignoring_n_is_asked_for_the_rest_with_new_seeds(chat_server, openai_cfg):
    chat_server.script = [(200, chat_server.completion(t), 0) for t in ("a", "b", "c")]
    model = llm.from_config(openai_cfg)
    assert model.complete(HELLO, n=3, seed=7) == ["a", "b", "c"]
    assert [(r["body"]["n"], r["body"]["seed"]) for r in chat_server.requests] == [(3, 7), (2, 8), (1, 9)]
    assert (model.usage().prompt_tokens, model.usage().completion_tokens) == (3 * 11, 3 * 5)  # 3 requests billed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base_url": None, "backend": "openai"}, "base_url"),
        ({"temprature": 0.1}, r"unknown keys \['temprature'\]"),
        ({"backend": "claude"}, "llm.backend must be local, openai, hf or replay, got 'claude'"),
        ({"cache": {"path": "x.jsonl", "mode": "sometimes"}}, "cache.mode must be record, replay or off"),
        ({"max_retries": -1}, r"llm \(openai\): max_retries must be an integer >= 0, got -1"),
        ({"max_retries": 2.5}, r"max_retries must be an integer >= 0, got 2.5"),
        ({"timeout_s": 0}, r"timeout_s must be a number > 0, got 0"),
        ({"backoff_s": -1.0}, r"backoff_s must be a number >= 0, got -1.0"),
        ({"base_url": "localhost:8000/v1"}, r"base_url must start with http:// or https://"),
        ({"model": ""}, r"model must be a non-empty string"),
        ({"api_key_env": 5}, r"api_key_env must name an environment variable"),
    ],
)
def test_bad_config_names_the_field(openai_cfg, change, message):
    cfg = {k: v for k, v in (openai_cfg | change).items() if v is not None}
    with pytest.raises(ValueError, match=message):
        llm.from_config(cfg)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "non-empty list"),
        ([{"role": "robot", "content": "x"}], r"messages\[0\].role must be one of"),
        ([{"role": "user", "content": "x"}, {"role": "user"}], r"messages\[1\] must be a dict with keys"),
        ([{"role": "user", "content": 3}], r"messages\[0\].content must be a string"),
    ],
)
def test_bad_messages_name_the_message(openai_cfg, messages, message):
    with pytest.raises(ValueError, match=message):
        llm.from_config(openai_cfg).complete(messages)
