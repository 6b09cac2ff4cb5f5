"""Starts `deepinfer serve` on a free loopback port for the e2e tests and stops it with SIGINT.

Usage in a test module: `with Server(binary, args) as s: s.url, s.pid, s.metrics()`. The binary comes from
the DEEPINFER_BINARY environment variable (ctest sets it) or --binary. Exit code 77 means "skipped" to ctest
(used when the openai package is not installed, e.g. offline)."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_MODEL = os.path.join(ROOT, "tests/data/v4_tiny_fp32")
TINY_TOKENIZER = os.path.join(ROOT, "tests/e2e/data/tiny_tokenizer")


def require_openai():
    try:
        import openai  # noqa: F401
    except ImportError:
        print("SKIP: the openai package is not installed (tools/setup.sh installs it when online)")
        sys.exit(SKIP)


def binary():
    b = os.environ.get("DEEPINFER_BINARY") or os.path.join(ROOT, "build-cpu/deepinfer")
    if not os.path.exists(b):
        raise SystemExit(f"deepinfer binary not found at {b} (set DEEPINFER_BINARY)")
    return b


class Server:
    def __init__(self, args, startup_s=120):
        self.args = args
        self.startup_s = startup_s
        self.log = []

    def __enter__(self):
        cmd = [binary(), "serve", "--port", "0"] + self.args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.pid = self.proc.pid
        deadline = time.time() + self.startup_s
        port = None
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"on http://([\d.]+):(\d+)", line)
            if m:
                port = int(m.group(2))
                break
        if port is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        # Keep draining the log so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    def _drain(self):
        for line in self.proc.stdout:
            self.log.append(line)

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.rc = -9
        self.proc.stdout.close()
        return False

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read().decode()

    def metrics(self):
        """Prometheus text -> {'name{labels}': float}."""
        out = {}
        for line in self.get("/metrics").splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0
