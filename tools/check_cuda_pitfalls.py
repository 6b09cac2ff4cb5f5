#!/usr/bin/env python3
"""Checks the CUDA sources for constructs nvcc has miscompiled here; exit 1 naming each place.

- An unbraced `if constexpr (...)` body followed by a `#pragma` and a loop: nvcc 13.0 took the pragma's loop
  into the discarded branch (the w4a8 kernels lost their chunk loop, 2026-12-06; docs/cuda.md). Brace the body.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
IF_CONSTEXPR = re.compile(r"\bif constexpr\b")
OPENS_BLOCK = re.compile(r"\{\s*(//.*)?$")


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def unbraced_if_before_pragma(lines: list[str]) -> list[int]:
    """Line numbers (1-based) of unbraced `if constexpr` statements that a `#pragma` + loop follows."""
    found = []
    for i, line in enumerate(lines):
        if not line.strip().startswith("#pragma") or i + 1 >= len(lines):
            continue
        level = indent(lines[i + 1])  # the loop the pragma belongs to
        for j in range(i - 1, max(-1, i - 60), -1):  # the statement before it at the loop's level
            prev = lines[j].strip()
            if not prev or prev.startswith(("//", "#")):
                continue
            if indent(lines[j]) < level:
                break
            if indent(lines[j]) == level:
                if IF_CONSTEXPR.search(prev) and not OPENS_BLOCK.search(prev):
                    found.append(j + 1)
                break
    return found


BAD_SAMPLE = """    if constexpr (kOnce)  // a comment
        for (int e = 0; e < n; ++e) {
            x[e] = 0;
        }
#pragma unroll 1
    for (int c = 0; c < n; ++c) {
    }"""
GOOD_SAMPLES = (BAD_SAMPLE.replace("(kOnce)  // a comment", "(kOnce) {  // a comment").replace(
    "        }\n#pragma", "        }\n    }\n#pragma"), """    if constexpr (kRowBase)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
        }""")


def self_test() -> int:
    """The check flags the miscompiled form and passes its braced form and a pragma'd body."""
    ok = unbraced_if_before_pragma(BAD_SAMPLE.split("\n")) == [1]
    ok &= all(unbraced_if_before_pragma(s.split("\n")) == [] for s in GOOD_SAMPLES)
    print("check_cuda_pitfalls self-test:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    bad = []
    for pattern in ("src/**/*.cu", "src/**/*.cuh", "bench/**/*.cu", "tests/**/*.cu"):
        for path in sorted(ROOT.glob(pattern)):
            lines = path.read_text(encoding="utf-8").split("\n")
            bad += [f"{path.relative_to(ROOT)}:{n}" for n in unbraced_if_before_pragma(lines)]
    for place in bad:
        print(f"{place}: unbraced `if constexpr` body followed by a #pragma'd loop (nvcc may take the loop "
              "into the discarded branch): brace the body")
    if not bad:
        print("check_cuda_pitfalls: no known pitfall")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
