"""Tokenizers: round trips, special tokens, padding, unknown characters, the HF wrapper."""

import random
import re
import string

import ml_collections
import numpy as np
import pytest

from trace_jax.tokenizer import CharTokenizer, HFTokenizer, get_tokenizer

REQUIRED = string.digits + "+-*=,()[] " + string.ascii_lowercase + "\n"


def test_char_vocab():
    tok = CharTokenizer()
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.vocab_size <= 64
    ids = tok.encode(REQUIRED)
    assert len(ids) == len(REQUIRED)
    assert len(set(ids)) == len(REQUIRED)  # one distinct id per character
    assert all(3 <= i < tok.vocab_size for i in ids)  # never a special id


def test_char_round_trip():
    tok = CharTokenizer()
    rnd = random.Random(0)
    alphabet = REQUIRED + ".:#"
    for _ in range(200):
        s = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 30)))
        assert tok.decode(tok.encode(s)) == s
        assert tok.decode(tok.encode(s, add_bos=True, add_eos=True)) == s


def test_char_specials_and_decode():
    tok = CharTokenizer()
    ids = tok.encode("12+3=", add_bos=True, add_eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and len(ids) == 7
    after = tok.encode("99")
    assert tok.decode(ids + after) == "12+3="  # stops at EOS
    assert tok.decode(ids + after, stop_at_eos=False) == "12+3=99"  # EOS dropped
    assert tok.decode([0, 0] + tok.encode("ab") + [0]) == "ab"  # PAD dropped
    assert tok.decode(np.array(tok.encode("x y"), dtype=np.int32)) == "x y"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])


def test_decode_response_keeps_what_the_policy_emitted():
    """What the reward sees: cut at EOS; PAD, BOS and ids outside the vocabulary (a model with a
    larger vocabulary samples them) become U+FFFD instead of vanishing ("1<pad>5" is not "15")."""
    tok = CharTokenizer()
    one, five = tok.encode("1"), tok.encode("5")
    assert tok.decode_response(one + five + [tok.eos_id] + one) == "15"
    for bad in (tok.pad_id, tok.bos_id, tok.vocab_size, 151_935):
        assert tok.decode_response(one + [bad] + five + [tok.eos_id]) == "1\ufffd5"
    assert tok.decode_response(np.array([tok.eos_id], np.int32)) == ""
    from trace_jax.tasks import Example, get_task
    task = get_task("addition", digits=1)
    ex = Example("7+8=", "15", "15")
    assert task.reward(ex, tok.decode_response(one + [tok.pad_id] + five + [tok.eos_id])) == 0.0
    assert task.reward(ex, tok.decode_response(one + five + [tok.eos_id])) == 1.0


@pytest.mark.parametrize("bad", ["A", "€", "\t", "é"])
def test_char_unknown_raises_naming_char(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        CharTokenizer().encode("12" + bad + "3")


def test_encode_batch_padding():
    tok = CharTokenizer()
    texts = ["1+1=", "", "123+456="]
    for pad in ("left", "right"):
        toks, lens = tok.encode_batch(texts, max_len=10, pad=pad, add_bos=True)
        assert toks.dtype == np.int32 and lens.dtype == np.int32
        assert toks.shape == (3, 10)
        for row, text, n in zip(toks, texts, lens):
            ids = [1] + tok.encode(text)
            assert n == len(ids)
            body = row[10 - n:] if pad == "left" else row[:n]
            rest = row[: 10 - n] if pad == "left" else row[n:]
            assert body.tolist() == ids
            assert (rest == 0).all()
            assert tok.decode(row) == text
    with pytest.raises(ValueError, match="max_len"):
        tok.encode_batch(["123456"], max_len=5)
    with pytest.raises(ValueError, match="pad"):
        tok.encode_batch(["1"], max_len=5, pad="middle")


def test_get_tokenizer():
    c = ml_collections.ConfigDict({"tokenizer": {"kind": "char", "path": ""}})
    assert isinstance(get_tokenizer(c), CharTokenizer)
    assert isinstance(get_tokenizer(c.tokenizer), CharTokenizer)
    c.tokenizer.kind = "bpe"
    with pytest.raises(ValueError, match="kind"):
        get_tokenizer(c)
    c.tokenizer.kind = "hf"
    with pytest.raises(ValueError, match="path"):
        get_tokenizer(c)


@pytest.fixture
def hf_json(tmp_path):
    # a pinned requirement (requirements.txt) that HFTokenizer needs: missing, these tests must
    # fail, not skip (an importorskip reported the HF tokenizer tests as passing without it)
    import tokenizers
    from tokenizers import decoders, models, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(
        vocab_size=60,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=list("0123456789+="),
        show_progress=False,
    )
    rnd = random.Random(0)
    corpus = [f"{rnd.randrange(100)}+{rnd.randrange(100)}=" for _ in range(300)]
    tok.train_from_iterator(corpus, trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path, tok


def test_hf_tokenizer(hf_json):
    path, ref = hf_json
    tok = HFTokenizer(str(path))
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)  # trainer order of special_tokens
    assert tok.vocab_size == ref.get_vocab_size()
    for s in ["12+34=", "0+0=", "99+1=46", ""]:
        ids = tok.encode(s)
        assert ids == ref.encode(s, add_special_tokens=False).ids
        assert tok.decode(ids) == s
        assert tok.decode(tok.encode(s, add_bos=True, add_eos=True) + tok.encode("7")) == s
    assert len(tok.encode("12+34=")) < len("12+34=")  # merges were learned and applied
    with pytest.raises(ValueError, match="x"):
        tok.encode("12+x=")
    toks, lens = tok.encode_batch(["1+1=", "12+34="], max_len=8, pad="left")
    assert toks.shape == (2, 8) and toks.dtype == np.int32
    assert toks[0, 8 - lens[0]:].tolist() == ref.encode("1+1=", add_special_tokens=False).ids
    assert (toks[0, : 8 - lens[0]] == 0).all()
    cfg = ml_collections.ConfigDict({"tokenizer": {"kind": "hf", "path": str(path)}})
    assert get_tokenizer(cfg).encode("5+5=") == tok.encode("5+5=")


def _bpe_without_unknown(tmp_path):
    """A BPE with no unknown token and no byte fallback: it drops characters it lacks."""
    # a pinned requirement (requirements.txt) that HFTokenizer needs: missing, these tests must
    # fail, not skip (an importorskip reported the HF tokenizer tests as passing without it)
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.decoder = decoders.Fuse()
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=40, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=list("0123456789+="), show_progress=False)
    tok.train_from_iterator([f"{a}+{b}=" for a in range(20) for b in range(20)], trainer)
    path = tmp_path / "no_unk.json"
    tok.save(str(path))
    return str(path), tok


def test_hf_tokenizer_refuses_text_it_would_drop(tmp_path):
    """The raw tokenizer drops the 'x' of '12+x=3' (the prompt silently becomes '12+=3');
    HFTokenizer names the character instead. Whitespace a pre-tokenizer splits on is not text."""
    path, raw = _bpe_without_unknown(tmp_path)
    assert raw.decode(raw.encode("12+x=3", add_special_tokens=False).ids) == "12+=3"
    tok = HFTokenizer(path)
    with pytest.raises(ValueError, match=r"character 'x' \(position 3 of '12\+x=3'\) is dropped or changed"):
        tok.encode("12+x=3")
    assert tok.decode(tok.encode("12+ 3=")) == "12+3="


def test_hf_tokenizer_reads_special_token_spellings_as_text(hf_json, tmp_path):
    """'</s>' inside a prompt is four characters, not the EOS id (which ended the prompt at
    decode); the special-token names come from the config's tokenizer fields."""
    path, _ = hf_json
    tok = HFTokenizer(str(path))
    with pytest.raises(ValueError, match="not in the vocabulary"):  # ('<', '/', 's', '>')
        tok.encode("1+</s>2=")
    cfg = ml_collections.ConfigDict({"tokenizer": {"kind": "hf", "path": str(path),
                                                   "pad_token": "</s>", "bos_token": "",
                                                   "eos_token": "<pad>"}})
    named = get_tokenizer(cfg)
    assert (named.pad_id, named.eos_id, named.bos_id) == (2, 0, 1)
