"""A tokenizer built on the box for the benchmark client's random-ids prompts: nothing is downloaded.

The client draws prompt token ids below the tokenizer's vocabulary size and (with --tokenize-prompt) sends the
ids themselves, so any tokenizer whose vocabulary is smaller than the model's gives prompts of exactly the
requested length; this one is a word-level vocabulary of VOCAB words, saved as a transformers fast tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 1000


def build(folder: Path, size: int = VOCAB) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` of ``size`` words into ``folder`` (AutoTokenizer
    loads it); returns it. A server's tokenizer covers its model's whole vocabulary (``size``: the config's
    vocab_size), so that every id a dummy model emits decodes to a word and streams as text."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, size)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"), pretty=False)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1 << 20,
              "clean_up_tokenization_spaces": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return folder
