#!/usr/bin/env python3
"""Writes tests/e2e/data/tiny_tokenizer/: a byte-level tokenizer whose 256 ids are the 256 bytes (id = byte
value, no merges), with the V4 tokenizer's pre-tokenizer and decoder. It pairs with the vocab-256 fixture
tests/data/v4_tiny_fp32 so the HTTP server can be tested end to end in seconds. BOS = byte 0, EOS = byte 1
(the fixture's config.json ids). Standard library only; check with `tokenizers` if installed."""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/e2e/data/tiny_tokenizer"


def bytes_to_unicode():
    # GPT-2's byte-level alphabet, as used by Hugging Face ByteLevel.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    v4 = json.loads((ROOT / "assets/tokenizer/tokenizer.json").read_text(encoding="utf-8"))
    alphabet = bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": v4["pre_tokenizer"],
        "post_processor": None,
        "decoder": v4["decoder"],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    cfg = {"add_bos_token": False, "add_eos_token": False, "bos_token": alphabet[0], "eos_token": alphabet[1],
           "model_max_length": 16384}
    (OUT / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    try:
        from tokenizers import Tokenizer
        t = Tokenizer.from_file(str(OUT / "tokenizer.json"))
        ids = t.encode("héllo, world").ids
        assert ids == list("héllo, world".encode()), ids
        print("checked with tokenizers", ids)
    except ImportError:
        pass
    print("wrote", OUT)


if __name__ == "__main__":
    main()
