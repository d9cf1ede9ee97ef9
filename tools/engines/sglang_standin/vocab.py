"""Output tokens and text. The reference engine has no LM head: a token is drawn from its step's output.

Each decode step's output row (the last layer's hidden state of the request) gives a seed, its argmax
(ranks.py); the token id is the seed mixed with the request's output position, picked from the ids the
tokenizer decodes to visible text. With a tokenizer that transformers.AutoTokenizer loads from
--tokenizer-path or --model-path, text is its decode of the output ids (so a client that re-tokenizes
the text counts about as many tokens); without one, ids come from range(DEFAULT_VOCAB) and text is
``<id>`` words. The ids mean nothing: the stand-in measures speed, not language.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_VOCAB = 32000
# Ids looked at for a visible decode (a tokenizer's first ids are mostly special and byte tokens).
SCANNED_IDS = 4096


class Vocab:
    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer
        if tokenizer is None:
            self.ids = list(range(DEFAULT_VOCAB))
        else:
            special = set(getattr(tokenizer, "all_special_ids", []) or [])
            size = min(len(tokenizer), SCANNED_IDS)
            self.ids = [i for i in range(size) if i not in special and tokenizer.decode([i]).strip()]
            if not self.ids:
                raise ValueError("the tokenizer decodes none of its first ids to visible text")

    @classmethod
    def load(cls, paths: list[str | None], log) -> "Vocab":
        """The first of ``paths`` that is a directory holding a tokenizer, else no tokenizer."""
        for path in paths:
            if path and Path(path).is_dir() and any(Path(path).glob("tokenizer*")):
                from transformers import AutoTokenizer

                tok = AutoTokenizer.from_pretrained(path)
                log(f"tokenizer: {path} ({len(tok)} ids)")
                return cls(tok)
        log("tokenizer: none found at the model or tokenizer path; output text is <id> words")
        return cls()

    def token_of(self, seed: int, position: int) -> int:
        return self.ids[(seed * 31 + position * 7919) % len(self.ids)]

    def text(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(f"<{i}> " for i in ids)
        return self.tokenizer.decode(ids)

    def count(self, text: str) -> int:
        """Prompt tokens of a text prompt."""
        if self.tokenizer is None:
            return max(1, len(text.split()))
        return len(self.tokenizer.encode(text, add_special_tokens=False))
