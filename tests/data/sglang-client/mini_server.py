"""A minimal HTTP server for tests/test_sglang_adapter.py: the few routes SGLang's benchmark client and the adapter
call (/health, /get_model_info, /model_info, /v1/models, /server_info, /flush_cache, /generate streaming as
SGLang streams it). Not the stand-in (tools/engines/sglang_standin): no model, a fixed sleep per token.

``python mini_server.py [any SGLang args] --host H --port P``; behaviour from the environment:
MINI_TOKEN_MS (sleep per generated token, default 2), MINI_FAIL=exit|oom|hang|startup-traceback|late-traceback|every3-500,
MINI_CHILD=1 (start a child process in the group that sleeps: the adapter must stop it too),
MINI_PIDFILE (write this process's pid, and the child's, one a line).
"""

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_S = float(os.environ.get("MINI_TOKEN_MS", "2")) / 1000
FAIL = os.environ.get("MINI_FAIL", "")
served = {"requests": 0}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _json(self, obj, status=200):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path in ("/health", "/health_generate"):
            self._json({})
        elif self.path in ("/get_model_info", "/model_info"):
            self._json({"model_path": "mini", "tokenizer_path": None, "is_generation": True})
        elif self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": "mini", "object": "model"}]})
        elif self.path in ("/server_info", "/get_server_info"):
            self._json({"server": "mini (tests)", "internal_states": [{}]})
        else:
            self._json({"error": "no route " + self.path}, 404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/flush_cache":
            self._json({})
        elif self.path == "/generate":
            self._generate(body)
        else:
            self._json({"error": "no route " + self.path}, 404)

    def _generate(self, body):
        served["requests"] += 1
        if FAIL == "every3-500" and served["requests"] % 3 == 0:
            self._json({"error": "planted: every third request fails"}, 500)
            return
        if FAIL == "late-traceback" and served["requests"] == 3:
            print("Traceback (most recent call last):\n  File \"mini\", line 1\nRuntimeError: planted", flush=True)
        prompt = len(body.get("input_ids") or str(body.get("text", "")).split())
        n = body["sampling_params"]["max_new_tokens"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(1, n + 1):
            time.sleep(TOKEN_S)
            chunk = {"text": " ".join(f"w{j % 900 + 1}" for j in range(i)), "output_ids": list(range(i)),
                     "meta_info": {"prompt_tokens": prompt, "completion_tokens": i, "e2e_latency": 0.0}}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


def main(argv):
    host, port = argv[argv.index("--host") + 1], int(argv[argv.index("--port") + 1])
    pids = [os.getpid()]
    if os.environ.get("MINI_CHILD") == "1":
        pids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid)
    if os.environ.get("MINI_PIDFILE"):
        with open(os.environ["MINI_PIDFILE"], "w") as handle:
            handle.write("".join(f"{p}\n" for p in pids))
    print(f"mini server args: {argv}", flush=True)
    if FAIL == "exit":
        print("Traceback (most recent call last):\nValueError: planted launch failure", flush=True)
        return 3
    if FAIL == "oom":
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        return 1
    if FAIL == "hang":
        time.sleep(600)
    if FAIL == "startup-traceback":  # reported and survived, as servers do with an optional import
        print("Traceback (most recent call last):\nImportError: planted optional import", flush=True)
    ThreadingHTTPServer((host, port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
