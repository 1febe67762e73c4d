"""A small Whisper-style English text normaliser and a word error rate, for scoring transcripts.

normalize(text), in order:
  1. Unicode NFKC, then lowercase.
  2. Apostrophes (' and ’) are deleted, so "don't" and "dont" score the same.
  3. Every other character that is not a letter or a digit becomes a space: punctuation goes, and
     hyphenated words split ("sixty-two" -> "sixty two", "wood-blocks" -> "wood blocks").
  4. Runs of whitespace collapse to one space; leading and trailing space is stripped.
Numbers are left as written ("1462" and "fourteen sixty two" stay different words), and there is no
spelling or contraction table: unlike openai-whisper's EnglishTextNormalizer this is deliberately
simple, so both systems being compared are scored by the same, obvious rule.

word_errors(ref, hyp) is a word-level Levenshtein distance (substitutions + insertions + deletions);
wer() sums it over a corpus and divides by the number of reference words.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Iterable

_APOSTROPHES = re.compile(r"['’]")
_NOT_WORD = re.compile(r"[^\w]|_")
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = _APOSTROPHES.sub("", text)
    text = _NOT_WORD.sub(" ", text)
    return _SPACES.sub(" ", text).strip()


def words(text: str) -> list[str]:
    normalized = normalize(text)
    return normalized.split(" ") if normalized else []


def word_errors(ref: list[str], hyp: list[str]) -> int:
    """Minimum number of word substitutions, insertions and deletions turning ref into hyp."""
    previous = list(range(len(hyp) + 1))
    for i, ref_word in enumerate(ref, start=1):
        current = [i] + [0] * len(hyp)
        for j, hyp_word in enumerate(hyp, start=1):
            current[j] = min(
                previous[j] + 1,  # deletion of ref_word
                current[j - 1] + 1,  # insertion of hyp_word
                previous[j - 1] + (ref_word != hyp_word),  # match or substitution
            )
        previous = current
    return previous[-1]


def wer(pairs: Iterable[tuple[str, str]]) -> tuple[float, int, int]:
    """Corpus WER over (reference, hypothesis) texts: (errors / ref words, errors, ref words)."""
    errors = 0
    total = 0
    for ref_text, hyp_text in pairs:
        ref = words(ref_text)
        errors += word_errors(ref, words(hyp_text))
        total += len(ref)
    return (errors / total if total else 0.0), errors, total
