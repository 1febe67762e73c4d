#!/usr/bin/env python3
"""Reference token ids and texts from HF `tokenizers` for waav's BpeTokenizer tests.

Two modes:
  tokenizer_reference.py --tokenizer T --write-expected OUT
      Encodes the fixed SENTENCES below and writes {"tokenizer_sha256", "cases": [{"text", "ids"}]}
      to OUT (tests/reference/tokenizer_expected.json is produced this way and committed).
  tokenizer_reference.py --tokenizer T --input IN --output OUT
      IN is {"encode": [str, ...], "decode": [[id, ...], ...]}; writes
      {"encode": [[id, ...]], "decode": [str], "decode_with_specials": [str]}. Used by the C++
      test at run time on freshly drawn random strings.
Exit status 3 means the `tokenizers` package is missing (the test then skips).
"""
import argparse
import hashlib
import json
import sys

SENTENCES = [
    "Hello world",
    " And so my fellow Americans, ask not what your country can do for you.",
    "ask what you can do for your country.",
    "The year 1776, 3.14159 and 1,000,000 dollars; 42nd street at 10:30pm.",
    "I'm sure you've seen it. We'll go; they'd said they're ready. It's John's. DON'T SHOUT'S",
    "Punctuation!!! ...and more?! (brackets) [square] {curly} <angle> \"quotes\" 'single' -- dash",
    "Café naïve résumé façade jalapeño Ångström über straße",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji: 😀🎉👍🏽 👨‍👩‍👧 ❤️ and flags 🇫🇷",
    "multiple   spaces    here",
    "  leading spaces",
    " leading space",
    "trailing spaces   ",
    "tabs\tand\nnewlines\n\nand\r\nCRLF",
    "Ελληνικά και Русский текст, עברית, العربية ١٢٣",
    "numbers: ½ ² ³ Ⅻ ٣ ໓",
    "a",
    " ",
    "",
    "e\u0301 combining accent, no\u00a0break\u2003em space\u3000ideographic",
    "<|notatoken|> looks special but is not",
    "https://example.com/path?query=1&x=y#frag user@example.org",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
]


def load(path):
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        print(f"tokenizers is not installed: {e}", file=sys.stderr)
        sys.exit(3)
    return Tokenizer.from_file(path)


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--write-expected")
    ap.add_argument("--input")
    ap.add_argument("--output")
    args = ap.parse_args()
    tok = load(args.tokenizer)

    if args.write_expected:
        with open(args.tokenizer, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        cases = [{"text": s, "ids": encode(tok, s)} for s in SENTENCES]
        # The committed expectation must not depend on HF matching added tokens in the text.
        assert all(i < 50256 for c in cases for i in c["ids"]), "special id in expected encoding"
        with open(args.write_expected, "w", encoding="utf-8") as f:  # one case per line
            lines = [json.dumps(c, ensure_ascii=False) for c in cases]
            f.write('{"tokenizer_sha256": "%s",\n "cases": [\n  %s\n ]\n}\n'
                    % (sha, ",\n  ".join(lines)))
        return 0

    if not (args.input and args.output):
        ap.error("need --write-expected, or --input and --output")
    with open(args.input, encoding="utf-8") as f:
        req = json.load(f)
    res = {
        "encode": [encode(tok, s) for s in req.get("encode", [])],
        "decode": [tok.decode(ids, skip_special_tokens=True) for ids in req.get("decode", [])],
        "decode_with_specials": [
            tok.decode(ids, skip_special_tokens=False) for ids in req.get("decode", [])
        ],
    }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(res, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
