"""A real HTTP server on loopback speaking the chat-completions protocol, scripted per test."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class ChatServer:
    """Answers POST /v1/chat/completions from a script of (status, body, delay_s[, headers]) steps.

    `body` is a dict (sent as JSON) or a str (sent raw). The last step repeats when the
    script runs out. Every request (path, headers, JSON body) is kept in `requests`.
    """

    def __init__(self):
        self.script: list[tuple[int, dict | str, float]] = []
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                request = json.loads(self.rfile.read(length))
                with server._lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": request})
                    step = server.script.pop(0) if len(server.script) > 1 else server.script[0]
                status, body, delay, *headers = step
                time.sleep(delay)
                payload = body if isinstance(body, str) else json.dumps(body)
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload.encode())))
                    for name, value in (headers[0] if headers else {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload.encode())
                except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    @staticmethod
    def completion(*texts: str, prompt_tokens: int = 11, completion_tokens: int = 5) -> dict:
        """A chat-completions response with one choice per text."""
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                for i, t in enumerate(texts)
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    server = ChatServer()
    yield server
    server.close()


@pytest.fixture
def openai_cfg(chat_server, monkeypatch):
    """Config of the `openai` backend pointed at the loopback server, with fast backoff."""
    monkeypatch.setenv("LLMTRAFFIC_TEST_KEY", "sk-test")
    return {
        "backend": "openai",
        "base_url": chat_server.url,
        "model": "test-model",
        "api_key_env": "LLMTRAFFIC_TEST_KEY",
        "timeout_s": 2.0,
        "max_retries": 2,
        "backoff_s": 0.01,
    }


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core machine: two intra-op threads fighting other processes
    were measured 60x slower than one (35 s vs 0.5 s for 100 training steps)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
