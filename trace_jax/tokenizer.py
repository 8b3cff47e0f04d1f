"""Tokenizers: a fixed character vocabulary for the synthetic tasks, and a HuggingFace wrapper.

Public API:

    CharTokenizer()                         fixed built-in vocabulary, ``vocab_size`` <= 64
    HFTokenizer(path, *, pad_token=None, bos_token=None, eos_token=None)
    get_tokenizer(config) -> Tokenizer      from ``config.tokenizer.{kind, path}``

Both share one interface (:class:`Tokenizer`):

    pad_id, bos_id, eos_id, vocab_size
    encode(text, add_bos=False, add_eos=False) -> list[int]
    decode(ids, stop_at_eos=True) -> str
    decode_response(ids) -> str        (what rewards see: nothing dropped, see its docstring)
    encode_batch(texts, max_len, pad="left", add_bos=False, add_eos=False)
        -> (tokens_BxL np.int32, lengths_B np.int32)

Guarantees: ``decode(encode(s)) == s`` for every string of vocabulary characters (for
``HFTokenizer``: for every string its ``tokenizer.json`` round-trips). ``encode`` never maps an
unknown character silently: it raises ``ValueError`` naming the character. ``decode`` drops PAD and
BOS, and stops at the first EOS (``stop_at_eos=True``) or drops EOS (``False``).

Shape letters: B = batch, L = ``max_len``.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal, Sequence

import numpy as np

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
INVALID = "\ufffd"  # what decode_response writes for a token that cannot be text there

# Order is part of the format: changing it changes every token id (and invalidates checkpoints).
CHARS = (
    "0123456789"
    "+-*=,()[] "
    "abcdefghijklmnopqrstuvwxyz"
    "\n"
    ".:;?!#/<>_"
)


class Tokenizer:
    """Shared batching and decoding logic; subclasses define ``_encode_text`` / ``_decode_ids``."""

    pad_id: int
    bos_id: int
    eos_id: int
    vocab_size: int

    def _encode_text(self, text: str) -> list[int]:
        raise NotImplementedError

    def _decode_ids(self, ids: list[int]) -> str:
        raise NotImplementedError

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text``, optionally framed by BOS / EOS. Unknown characters raise."""
        ids = self._encode_text(text)
        if add_bos:
            ids = [self.bos_id] + ids
        if add_eos:
            ids = ids + [self.eos_id]
        return ids

    def decode(self, ids: Iterable[int] | np.ndarray, stop_at_eos: bool = True) -> str:
        """Text of ``ids``; PAD and BOS dropped, cut at the first EOS (or EOS dropped)."""
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == self.eos_id:
                if stop_at_eos:
                    break
                continue
            if i in (self.pad_id, self.bos_id):
                continue
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} outside the vocabulary [0, {self.vocab_size})")
            out.append(i)
        return self._decode_ids(out)

    def decode_response(self, ids: Iterable[int] | np.ndarray) -> str:
        """Text of a sampled response, cut at the first EOS. A PAD, a BOS or an id outside the
        vocabulary before it (a model whose vocabulary is larger than the tokenizer's can sample
        one) becomes U+FFFD (:data:`INVALID`), which no task answer contains: unlike
        :meth:`decode`, nothing the policy emitted is dropped from what the reward sees."""
        pieces, run = [], []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id) or not 0 <= i < self.vocab_size:
                if run:
                    pieces.append(self._decode_ids(run))
                    run = []
                pieces.append(INVALID)
            else:
                run.append(i)
        if run:
            pieces.append(self._decode_ids(run))
        return "".join(pieces)

    def encode_batch(
        self,
        texts: Sequence[str],
        max_len: int,
        pad: Literal["left", "right"] = "left",
        add_bos: bool = False,
        add_eos: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode and pad to ``max_len``.

        Returns ``(tokens_BxL, lengths_B)``, both ``np.int32``; ``lengths`` counts the real
        (non-PAD) tokens. ``pad="left"`` right-aligns each row (for prompts fed to a decoder),
        ``"right"`` left-aligns it. A text longer than ``max_len`` tokens raises ``ValueError``
        (never truncated silently).
        """
        if pad not in ("left", "right"):
            raise ValueError(f"pad must be 'left' or 'right', got {pad!r}")
        tokens_BxL = np.full((len(texts), max_len), self.pad_id, dtype=np.int32)
        lengths_B = np.zeros((len(texts),), dtype=np.int32)
        for b, text in enumerate(texts):
            ids = self.encode(text, add_bos=add_bos, add_eos=add_eos)
            if len(ids) > max_len:
                raise ValueError(
                    f"text {b} has {len(ids)} tokens, more than max_len={max_len}: {text[:40]!r}"
                )
            lengths_B[b] = len(ids)
            if not ids:
                continue
            if pad == "left":
                tokens_BxL[b, max_len - len(ids) :] = ids
            else:
                tokens_BxL[b, : len(ids)] = ids
        return tokens_BxL, lengths_B


class CharTokenizer(Tokenizer):
    """One token per character of :data:`CHARS`; PAD=0, BOS=1, EOS=2, characters from 3 on."""

    def __init__(self) -> None:
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        self.chars = CHARS
        self._char_to_id = {c: i + 3 for i, c in enumerate(CHARS)}
        self.vocab_size = 3 + len(CHARS)

    def _encode_text(self, text: str) -> list[int]:
        ids = []
        for pos, c in enumerate(text):
            i = self._char_to_id.get(c)
            if i is None:
                raise ValueError(
                    f"character {c!r} (position {pos} of {text[:40]!r}) is not in the "
                    f"CharTokenizer vocabulary {CHARS!r}"
                )
            ids.append(i)
        return ids

    def _decode_ids(self, ids: list[int]) -> str:
        return "".join(CHARS[i - 3] for i in ids)


def _tokenizers_module():
    try:
        import tokenizers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "HFTokenizer needs the HuggingFace `tokenizers` package: pip install tokenizers"
        ) from e
    return tokenizers


class HFTokenizer(Tokenizer):
    """A ``tokenizer.json`` (HuggingFace ``tokenizers``) behind the :class:`Tokenizer` interface.

    Special tokens are looked up by name in the vocabulary: ``pad_token`` / ``bos_token`` /
    ``eos_token`` if given, else the first present of the common spellings (``<pad>``, ``[PAD]``,
    ``<|endoftext|>``, ...). A tokenizer without an EOS or PAD token is rejected. Without a BOS
    token, ``bos_id`` is the EOS id (the GPT-2 convention). The tokenizer's own post-processor
    (automatic special tokens) is not applied: framing is controlled by ``add_bos`` / ``add_eos``.
    Text is encoded as text: a special token's spelling inside it (``"</s>"``) is not the control
    token. An input that maps to the tokenizer's unknown token, or that the tokenizer drops (a
    model without an unknown token or byte fallback), raises ``ValueError`` naming the text.
    """

    _CANDIDATES = {
        "pad": ("<pad>", "[PAD]", "<|pad|>", "<|endoftext|>"),
        "bos": ("<bos>", "<s>", "[BOS]", "<|begin_of_text|>", "<|im_start|>"),
        "eos": ("<eos>", "</s>", "[EOS]", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>"),
    }

    def __init__(
        self,
        path: str,
        *,
        pad_token: str | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
    ) -> None:
        tokenizers = _tokenizers_module()
        self.path = str(path)
        self._tok = tokenizers.Tokenizer.from_file(self.path)
        self._tok.encode_special_tokens = True  # (text, not control tokens)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eos_id = self._special("eos", eos_token, required=True)
        self.pad_id = self._special("pad", pad_token, required=True)
        bos = self._special("bos", bos_token, required=False)
        self.bos_id = self.eos_id if bos is None else bos
        unk = getattr(self._tok.model, "unk_token", None)
        self._unk_id = self._tok.token_to_id(unk) if unk else None

    def _special(self, kind: str, name: str | None, required: bool) -> int | None:
        names = (name,) if name is not None else self._CANDIDATES[kind]
        for n in names:
            i = self._tok.token_to_id(n)
            if i is not None:
                return i
        if required or name is not None:
            raise ValueError(
                f"{self.path}: no {kind} token (looked for {names}); pass {kind}_token="
            )
        return None

    def _encode_text(self, text: str) -> list[int]:
        enc = self._tok.encode(text, add_special_tokens=False)
        if self._unk_id is not None and self._unk_id in enc.ids:
            start, end = enc.offsets[enc.ids.index(self._unk_id)]
            raise ValueError(
                f"text {text[start:end]!r} (position {start} of {text[:40]!r}) is not in the "
                f"vocabulary of {self.path} (it maps to the unknown token)"
            )
        # (offsets do not show a dropped character: they shift the later tokens onto it)
        back = self._tok.decode(enc.ids, skip_special_tokens=False)
        got, want = "".join(back.split()), "".join(text.split())  # (up to whitespace)
        if got != want:
            i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), len(got))
            pos = [k for k, c in enumerate(text) if not c.isspace()][min(i, len(want) - 1)]
            raise ValueError(
                f"character {text[pos]!r} (position {pos} of {text[:40]!r}) is dropped or "
                f"changed by {self.path}: the text decodes back as {back[:40]!r} (the model "
                f"has no unknown token or byte fallback for it, or normalizes it)"
            )
        return list(enc.ids)

    def _decode_ids(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


def get_tokenizer(config: Any) -> Tokenizer:
    """The tokenizer named by ``config.tokenizer`` (``kind``: "char" | "hf", ``path``).

    ``config`` may be the top-level config or its ``tokenizer`` field; without a ``tokenizer``
    field the :class:`CharTokenizer` is returned.
    """
    cfg = getattr(config, "tokenizer", config) if config is not None else None
    kind = getattr(cfg, "kind", "char") if cfg is not None else "char"
    if kind == "char":
        return CharTokenizer()
    if kind == "hf":
        path = getattr(cfg, "path", None)
        if not path:
            raise ValueError("config.tokenizer.path must name a tokenizer.json when kind='hf'")
        names = {f"{k}_token": getattr(cfg, f"{k}_token", "") or None for k in ("pad", "bos", "eos")}
        return HFTokenizer(path, **names)
    raise ValueError(f"config.tokenizer.kind must be 'char' or 'hf', got {kind!r}")
