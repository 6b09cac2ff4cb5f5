#!/usr/bin/env python3
"""Writes benchmark texts to a folder (default /tmp/tokbench): mixed.txt (the 4 MiB mixed corpus text of
tools/tokenizer_make_corpus.py) and prose_code.txt (4 MiB of the corpus' English, CJK and code entries)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokenizer_make_corpus import build_mixed_text, CHINESE, CODE, ENGLISH, JAPANESE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tokbench")
    out.mkdir(parents=True, exist_ok=True)
    entries = [json.loads(line) for line in open(ROOT / "tests/data/tokenizer/corpus.jsonl", encoding="utf-8")]
    (out / "mixed.txt").write_bytes(build_mixed_text(entries, 4 << 20))
    prose = [{"text": t} for t in ENGLISH * 6 + CODE * 2 + CHINESE + JAPANESE]
    (out / "prose_code.txt").write_bytes(build_mixed_text(prose, 4 << 20))
    print(out)


if __name__ == "__main__":
    main()
