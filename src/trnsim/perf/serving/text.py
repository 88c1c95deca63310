"""Text to token ids without a downloaded tokenizer: UTF-8 bytes, one id per byte.

trnsim never downloads a model's tokenizer, so the HTTP server reads prompts as bytes (ids
0-255, which needs a vocabulary of at least 256) or takes token ids directly, as OpenAI's
completions API allows. Chat messages are joined with a plain ``role: content`` template.
"""

from __future__ import annotations

import codecs

from trnsim.errors import InvalidArgumentError

BYTE_VOCAB = 256


class ByteTokenizer:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        if self.vocab_size < BYTE_VOCAB:
            raise InvalidArgumentError(f"text prompts need a vocabulary of at least {BYTE_VOCAB} "
                                       f"(one id per byte); this model has {self.vocab_size}: "
                                       f"send token ids instead")
        return list(text.encode("utf-8"))

    def decoder(self) -> codecs.IncrementalDecoder:
        """Turns generated ids into text as they arrive (a character may span several ids);
        ids past the byte range decode as U+FFFD."""
        return codecs.getincrementaldecoder("utf-8")(errors="replace")

    def piece(self, decoder: codecs.IncrementalDecoder, token: int, final: bool = False) -> str:
        data = bytes([token]) if 0 <= token < BYTE_VOCAB else "\ufffd".encode()
        return decoder.decode(data, final=final)

    def decode(self, tokens: list[int]) -> str:
        decoder = self.decoder()
        return "".join(self.piece(decoder, t) for t in tokens) + decoder.decode(b"", final=True)


def chat_prompt(messages: list[dict]) -> str:
    """``role: content`` lines, then ``assistant:`` for the reply."""
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join([*lines, "assistant:"])
