"""Test double of a hosted LLM: an OpenAI-compatible chat server on 127.0.0.1 (real HTTP).

A hosted model cannot exist in the test suite, so this server stands in for one. It answers every
prompt the bus study sends — the reward designer's (initializer, modifier, refiner, repair), the
analyzer's and critic's, and the LLM-direct controller's — with plausible answers that vary with
the request (a hash of the prompt and the sampling seed), in the formats the prompts ask for:

* designer prompts: a ```python block with ``def reward(current_state, action, next_state)``
  built from headway-balance and holding terms with varying weights, reading the state size the
  prompt states; about one answer in seven is malformed (prose without code, or code importing
  ``os``) so that the repair path runs — a repair prompt always gets valid code;
* analyzer/critic prompts: a short diagnosis without code;
* LLM-direct prompts: ``Holding decision`` / ``Holding duration`` lines, about one in eight
  unreadable;
* the very first request is answered ``429 Too Many Requests`` (``retry-after: 0``).

Token counts are the prompt's and answer's characters ÷ 4, so a cassette recorded from it gives
a plausible request/token cost. ``requests`` counts every request served (429 included).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REWARD = '''Here is the reward.
```python
def reward(current_state, action, next_state):
    # balance the headways to the buses ahead and behind
    f, b = next_state[0], next_state[1]
    total = f + b
    imbalance = abs(f - b) / total if total > 0 else 1.0
    r = -{balance} * imbalance
    # each hold step delays the passengers on board
    r -= {hold} * action * (1.0 + next_state[{onboard}] / 50.0)
    {extra}
    return float(r)
```'''
EXTRAS = (
    "",
    "# credit the imbalance removed by this step\n    c_total = current_state[0] + current_state[1]\n"
    "    r += {w} * ((abs(current_state[0] - current_state[1]) / c_total if c_total > 0 else 1.0) - imbalance)",
    "# holding a bus close to its leader pays\n    r += {w} * action * (current_state[1] - current_state[0]) / max(current_state[0] + current_state[1], 1.0)",
)
ANALYSES = (
    "Training converged after a few episodes. The agents hold rarely ({share} % of decisions) and headways stay "
    "irregular; the holding penalty dominates the balance term. Suggestion: lower the holding penalty.",
    "The training return still oscillates. Holding is frequent and long; passengers on board wait. Suggestion: "
    "penalise holding more strongly when many passengers are on board.",
    "Headways are balanced but travel time rose slightly. Suggestion: reward the improvement of the balance rather "
    "than its level, and keep the holding cost small.",
)


def _digest(body: dict) -> int:
    text = json.dumps([body.get("messages"), body.get("seed")], sort_keys=True)
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def answer(body: dict) -> str:
    """The double's answer to a chat-completions request body."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    h = _digest(body)
    if system.startswith("You are a bus holding controller"):
        if h % 8 == 0:
            return "I would hold the bus for a while."
        return "Holding decision: 0\nHolding duration: -1" if h % 3 == 0 else f"Holding decision: 1\nHolding duration: {10 + h % 60}"
    if system.startswith("You analyse"):
        return ANALYSES[h % len(ANALYSES)].format(share=h % 40)
    repair = "## Why it was rejected" in user
    if not repair and h % 7 == 0:
        return "The reward should balance the headways and keep holding short."  # no code block
    if not repair and h % 7 == 1:
        return "```python\nimport os\ndef reward(current_state, action, next_state):\n    return 0.0\n```"
    dim = int(m.group(1)) if (m := re.search(r"A list of (\d) numbers", user)) else 6
    extra = EXTRAS[h % len(EXTRAS)].format(w=round(0.2 + (h >> 4) % 10 / 10, 2))
    return REWARD.format(balance=round(0.5 + (h >> 8) % 20 / 10, 2), hold=round(0.01 + (h >> 12) % 10 / 100, 3),
                         onboard=4 if dim == 6 else 2, extra=extra)


class LoopbackLLM:
    """The server; ``url`` is its ``base_url``. Use as a context manager."""

    def __init__(self):
        self.requests = 0
        self._lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with double._lock:
                    double.requests += 1
                    first = double.requests == 1
                if first:
                    return self._send(429, {"error": {"message": "rate limited (test double)"}}, {"retry-after": "0"})
                texts = [answer({**body, "seed": (body.get("seed") or 0) + i}) for i in range(body.get("n", 1))]
                prompt = sum(len(m["content"]) for m in body["messages"]) // 4
                self._send(200, {"id": "chatcmpl-double", "object": "chat.completion", "model": body.get("model"),
                                 "choices": [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                                             for i, t in enumerate(texts)],
                                 "usage": {"prompt_tokens": prompt, "completion_tokens": sum(len(t) for t in texts) // 4}})

            def _send(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> LoopbackLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
