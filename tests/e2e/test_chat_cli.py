"""`deepinfer chat` at its prompt (the tiny model with the tiny tokenizer). stdin a pipe: /reset answers,
Ctrl-C (SIGINT) quits with exit code 0, as Ctrl-D (end of input) does. On a pty: line editing and history. Ctrl-C during an answer stopping it
is the generator's cancel flag (tests/runtime/generation_test.cpp)."""
import os
import pty
import re
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

    def test_next_turn_starts_from_the_prefix_cache(self):
        # Two turns with --stats: the second restores the first turn's prompt state (its last 128-token
        # boundary), and the answers are those of a chat without the cache.
        turns = ("tell me about the cache and the experts of each layer " * 6 + "\nand the next one?\n").encode()
        runs = {}
        for flag in ("--prefix-cache", "--no-prefix-cache"):
            p = subprocess.run([sf.binary(), "chat", "--model", self.model, "--temperature", "0",
                                "--max-new-tokens", "6", "--stats", flag], input=turns, capture_output=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
            cached = [int(x) for x in re.findall(rb"\((\d+) from the prefix cache\)", p.stderr)]
            runs[flag] = (p.stdout, cached)
        self.assertEqual(len(runs["--prefix-cache"][1]), 2)
        self.assertEqual(runs["--prefix-cache"][1][0], 0)
        self.assertGreaterEqual(runs["--prefix-cache"][1][1], 128)
        self.assertEqual(runs["--no-prefix-cache"][1], [0, 0])
        self.assertEqual(runs["--prefix-cache"][0], runs["--no-prefix-cache"][0])

    def test_end_of_input_quits(self):
        p = self.start()
        try:
            wait_for(p, "> ")
            p.stdin.close()
            self.assertEqual(p.wait(timeout=10), 0)
        finally:
            p.kill()


class ChatTerminal(unittest.TestCase):
    """On a terminal (a pty) the prompt has line editing and history: a line fixed with the arrow keys is
    read as fixed, the up arrow recalls it, and Ctrl-C typed at the prompt quits with exit code 0."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.model = model_dir(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def read_until(self, fd, text, timeout=60):
        """Reads the terminal until `text`; what came after it stays for the next call."""
        seen = getattr(self, "pending", b"")
        deadline = time.time() + timeout
        while text.encode() not in seen and time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        if text.encode() not in seen:
            raise AssertionError(f"never saw {text!r} on the terminal; got:\n{seen.decode(errors='replace')}")
        at = seen.index(text.encode()) + len(text)
        self.pending = seen[at:]
        return seen[:at]

    def test_arrow_keys_edit_and_recall(self):
        linked = subprocess.run(["ldd", sf.binary()], capture_output=True, text=True).stdout
        if "libedit" not in linked:
            self.skipTest("built without libedit: chat reads plain lines")
        pid, fd = pty.fork()
        if pid == 0:  # the child: chat on the pty
            os.execv(sf.binary(), [sf.binary(), "chat", "--model", self.model])
        try:
            self.read_until(fd, "> ")
            os.write(fd, b"/rset" + b"\x1b[D" * 3 + b"e\r")  # "/rset", cursor back 3, insert "e": "/reset"
            self.read_until(fd, "(history cleared)")
            self.read_until(fd, "> ")
            os.write(fd, b"\x1b[A\r")  # up arrow: "/reset" again
            self.read_until(fd, "(history cleared)")
            self.read_until(fd, "> ")
            time.sleep(0.2)
            os.write(fd, b"\x03")  # Ctrl-C typed at the prompt
            _, status = os.waitpid(pid, 0)
            self.assertTrue(os.WIFEXITED(status), status)
            self.assertEqual(os.WEXITSTATUS(status), 0)
            pid = 0
        finally:
            if pid:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os.close(fd)


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
