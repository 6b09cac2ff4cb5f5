"""`deepinfer chat` at its prompt (stdin a pipe, the tiny model with the tiny tokenizer): /reset answers,
Ctrl-C (SIGINT) quits with exit code 0, as Ctrl-D (end of input) does. Ctrl-C during an answer stopping it
is the generator's cancel flag (tests/model/generation_test.cpp)."""
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import serve_fixture as sf


def model_dir(tmp):
    """The tiny fixture with the tiny tokenizer beside it (chat needs tokenizer.json in the model folder)."""
    d = os.path.join(tmp, "tiny_chat")
    os.makedirs(d)
    for f in os.listdir(sf.TINY_MODEL):
        os.symlink(os.path.join(sf.TINY_MODEL, f), os.path.join(d, f))
    for f in os.listdir(sf.TINY_TOKENIZER):
        if not os.path.exists(os.path.join(d, f)):
            os.symlink(os.path.join(sf.TINY_TOKENIZER, f), os.path.join(d, f))
    return d


def wait_for(proc, text, timeout=60):
    """Reads stderr until `text` appears; returns what was read."""
    seen = b""
    deadline = time.time() + timeout
    fd = proc.stderr.fileno()
    while time.time() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            seen += chunk
            if text.encode() in seen:
                return seen.decode(errors="replace")
        elif proc.poll() is not None:
            break
    raise AssertionError(f"never saw {text!r}; stderr so far:\n{seen.decode(errors='replace')}")


class ChatPrompt(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.model = model_dir(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self):
        return subprocess.Popen([sf.binary(), "chat", "--model", self.model], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def test_ctrl_c_at_the_prompt_quits(self):
        p = self.start()
        try:
            wait_for(p, "> ")
            p.stdin.write(b"/reset\n")
            p.stdin.flush()
            wait_for(p, "(history cleared)")
            time.sleep(0.2)  # at the read of the next prompt
            p.send_signal(signal.SIGINT)
            self.assertEqual(p.wait(timeout=10), 0)
        finally:
            p.kill()

    def test_end_of_input_quits(self):
        p = self.start()
        try:
            wait_for(p, "> ")
            p.stdin.close()
            self.assertEqual(p.wait(timeout=10), 0)
        finally:
            p.kill()


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
