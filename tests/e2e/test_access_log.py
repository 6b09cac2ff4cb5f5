"""Access log of `deepinfer serve`: one line per request on stderr with the request id (also sent as the
X-Request-Id header), method, path, status, prompt/completion tokens, time to first token and total time;
a stream's line comes after its last event and counts every token; errors carry their message; --log-level
warn keeps only 4xx/5xx, debug adds the metadata fields a request sent and the server ignored; a bad level
is a one-line error. Plain urllib: no client package needed."""
import json
import re
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

import serve_fixture as sf

ARGS = ["--model", sf.TINY_MODEL, "--tokenizer", sf.TINY_TOKENIZER, "--served-model-name", "tiny"]
LINE = re.compile(r"^deepinfer: (req-\d+) (\S+) (\S+) (\d{3})(.*) total=(\d+\.\d{3})s(.*)$")


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers.get("X-Request-Id"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("X-Request-Id"), e.read().decode()


def access_lines(server, want, timeout=10):
    """The parsed access lines once at least `want` are in the log."""
    deadline = time.time() + timeout
    while True:
        lines = [m for m in (LINE.match(l.rstrip("\n")) for l in list(server.log)) if m]
        if len(lines) >= want or time.time() > deadline:
            return lines
        time.sleep(0.05)


def field(rest, name):
    m = re.search(rf"\b{name}=(\S+)", rest)
    return m.group(1) if m else None


class AccessLog(unittest.TestCase):
    def test_info_logs_every_request_with_usage(self):
        with sf.Server(ARGS + ["--log-level", "info"]) as s:
            st, rid, body = post(s.url + "/v1/completions", {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 4})
            self.assertEqual(st, 200, body)
            usage = json.loads(body)["usage"]
            # ignore_eos: sampled at the default temperature, the tiny model ends ~1% of streams early
            st2, rid2, sse = post(s.url + "/v1/completions", {"model": "tiny", "prompt": [5, 6], "max_tokens": 3,
                                                             "stream": True, "ignore_eos": True})
            self.assertEqual(st2, 200)
            self.assertIn("[DONE]", sse)
            st3, rid3, err = post(s.url + "/v1/completions", {"model": "tiny", "prompt": [1], "max_tokens": -1})
            self.assertEqual(st3, 400)
            lines = {m.group(1): m for m in access_lines(s, 3)}
        for r in (rid, rid2, rid3):
            self.assertIn(r, lines, f"no access line for {r}:\n{''.join(s.log)}")
        m = lines[rid]
        self.assertEqual((m.group(2), m.group(3), m.group(4)), ("POST", "/v1/completions", "200"))
        self.assertEqual(int(field(m.group(5), "prompt_tokens")), usage["prompt_tokens"])
        self.assertEqual(int(field(m.group(5), "completion_tokens")), usage["completion_tokens"])
        ttft, total = float(field(m.group(5), "ttft").rstrip("s")), float(m.group(6))
        self.assertGreater(ttft, 0)
        self.assertLessEqual(ttft, total + 0.001)
        m2 = lines[rid2]  # the stream: written after its last event, so it has every token
        self.assertEqual(int(field(m2.group(5), "completion_tokens")), 3)
        self.assertEqual(int(field(m2.group(5), "prompt_tokens")), 2)
        m3 = lines[rid3]
        self.assertEqual(m3.group(4), "400")
        self.assertIn("max_tokens", m3.group(7))  # the error message, quoted

    def test_warn_keeps_errors_and_debug_names_ignored_fields(self):
        with sf.Server(ARGS + ["--log-level", "warn"]) as s:
            self.assertEqual(post(s.url + "/v1/completions", {"model": "tiny", "prompt": [1], "max_tokens": 1})[0], 200)
            st, rid, _ = post(s.url + "/v1/nothing", {})
            self.assertEqual(st, 404)
            lines = access_lines(s, 1)
        self.assertEqual([m.group(1) for m in lines], [rid], "".join(s.log))
        with sf.Server(ARGS + ["--log-level", "debug"]) as s:
            st, rid, _ = post(s.url + "/v1/completions",
                              {"model": "tiny", "prompt": [1], "max_tokens": 1, "user": "u", "service_tier": "auto"})
            self.assertEqual(st, 200)
            access_lines(s, 1)
            notes = [l for l in s.log if l.startswith(f"deepinfer: {rid} debug:")]
        self.assertEqual(len(notes), 1, "".join(s.log))
        self.assertIn("user, service_tier", notes[0])

    def test_bad_level_is_one_line(self):
        p = subprocess.run([sf.binary(), "serve", "--log-level", "loud"] + ARGS, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("--log-level 'loud'", p.stderr)


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
