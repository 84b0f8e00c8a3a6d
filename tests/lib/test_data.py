"""Tests of course_lib.data (chapter 9).

No test uses the network: downloads go to a local http.server on 127.0.0.1, or
to a closed local port (the "offline" case). Tests on the real data sets run
when COURSE_LIB_DATA points at a folder laid out like ../shared/data and are
skipped otherwise.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import subprocess
import sys
import threading
import zipfile
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

import course_lib.data as D
from course_lib.data import datasets as _datasets
from course_lib.masks import decoder_self_attention_mask, padding_mask

# ----------------------------------------------------------------------------- fixtures

BOM = "\ufeff"
ATTR = "CC-BY 2.0 (France) Attribution: tatoeba.org #{} (CM) & #{} (someone)"

FIXTURE_LINES = [
    BOM + "Hi.\t嗨。\t" + ATTR.format(1, 2),
    "Hi.\t你好。\t" + ATTR.format(1, 3),  # same English, second translation
    "",  # blank line: skipped silently
    "“Trust me,” he said.\t“相信我。” 他说。\t" + ATTR.format(4, 5),  # curly quotes, stray space
    "Don’t worry.\t別擔心。\t" + ATTR.format(6, 7),  # curly apostrophe, traditional characters
    "just one column",  # malformed
    "Are you busy ?\t你很忙吗 ?\t" + ATTR.format(8, 9),  # ASCII '?' in Chinese
    "   \t空的英语\t" + ATTR.format(10, 11),  # empty English: malformed
    "Tom is here.\tTom 在这儿。\t" + ATTR.format(12, 13),  # space between Latin and CJK
    "I like it.\t我喜欢。",  # no attribution column: still a pair
]


def write_tatoeba(root: Path, lines=FIXTURE_LINES) -> Path:
    path = root / "tatoeba-cmn-eng" / "cmn.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def big_tatoeba_bytes(n: int = 10_050) -> bytes:
    """A well-formed Tatoeba-like file large enough for the real validator (>= 10,000 pairs)."""
    lines = [f"Sentence number {i}.\t第{i}句。\t" + ATTR.format(i, i + 1) for i in range(n)]
    return (BOM + "\n".join(lines) + "\n").encode("utf-8")


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No COURSE_LIB_DATA, a fresh cache under tmp_path, no proxies for 127.0.0.1."""
    monkeypatch.delenv("COURSE_LIB_DATA", raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSE_LIB_CACHE", str(cache))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return cache


class LocalServer:
    """An http.server on 127.0.0.1 in a thread; `routes` maps a path to (status, bytes)."""

    def __init__(self, routes: dict[str, tuple[int, bytes]]):
        self.routes = routes
        self.requests: list[tuple[str, str]] = []  # (path, User-Agent)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server API
                server.requests.append((self.path, self.headers.get("User-Agent", "")))
                status, body = server.routes.get(self.path, (404, b"not found"))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port_url(path: str = "/cmn-eng.zip") -> str:
    """An address on 127.0.0.1 where nothing listens: the download fails at once, offline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def patch_tatoeba_sources(monkeypatch, *sources: D.Source) -> None:
    monkeypatch.setattr(_datasets, "TATOEBA_FILE", replace(D.TATOEBA_FILE, sources=tuple(sources)))


# ----------------------------------------------------------------------------- special tokens


def test_special_token_ids_are_fixed():
    assert (D.PAD_ID, D.BOS_ID, D.EOS_ID, D.UNK_ID) == (0, 1, 2, 3)
    assert D.SPECIAL_TOKENS == ("<pad>", "<bos>", "<eos>", "<unk>")
    bpe = D.train_bpe_tokenizer(["a cat sat on a mat"] * 3, vocab_size=40)
    char = D.train_char_tokenizer(["猫坐在垫子上"])
    for tok in (bpe, char):
        assert [tok.token_to_id(t) for t in D.SPECIAL_TOKENS] == [0, 1, 2, 3]
        assert tok.id_to_token(0) == "<pad>" and tok.id_to_token(3) == "<unk>"


# ----------------------------------------------------------------------------- Tatoeba parsing


def test_tatoeba_bom_attribution_and_malformed_lines(isolated, tmp_path):
    write_tatoeba(tmp_path)
    with pytest.warns(UserWarning, match=r"skipped 2 malformed line\(s\).*lines 6, 8"):
        triples = D.load_tatoeba_en_zh(tmp_path, with_attribution=True, download=False)
    assert len(triples) == 7
    en0, zh0, attr0 = triples[0]
    assert en0 == "Hi." and zh0 == "嗨。"  # BOM gone
    assert not any("\ufeff" in field for t in triples for field in t)
    assert attr0 == ATTR.format(1, 2)
    assert triples[-1] == ("I like it.", "我喜欢。", "")  # missing third column is fine
    with pytest.warns(UserWarning):
        pairs = D.load_tatoeba_en_zh(tmp_path, download=False)
    assert pairs == [t[:2] for t in triples]
    assert [p[0] for p in pairs].count("Hi.") == 2  # both translations kept
    assert "tatoeba.org" in D.TATOEBA_ATTRIBUTION and "manythings.org/anki" in D.TATOEBA_ATTRIBUTION
    assert "CC-BY 2.0 FR" in D.TATOEBA_ATTRIBUTION


def test_tatoeba_normalisation(isolated, tmp_path):
    write_tatoeba(tmp_path)
    with pytest.warns(UserWarning):
        pairs = dict(D.load_tatoeba_en_zh(tmp_path, download=False)[2:])
    assert pairs['"Trust me," he said.'] == "“相信我。”他说。"  # English straight, Chinese curly kept
    assert pairs["Don't worry."] == "別擔心。"  # traditional characters kept
    assert pairs["Are you busy ?"] == "你很忙吗？"  # ASCII ? -> full width, space dropped
    assert pairs["Tom is here."] == "Tom在这儿。"
    with pytest.warns(UserWarning):
        raw = D.load_tatoeba_en_zh(tmp_path, normalize=False, download=False)
    assert raw[0] == ("Hi.", "嗨。")  # BOM removed even without normalisation
    assert raw[2] == ("“Trust me,” he said.", "“相信我。” 他说。")


def test_normalizers_rules():
    assert D.normalize_english("  ‘Hi’   “you”\u200b\tthere…  ") == "'Hi' \"you\" there..."
    assert D.normalize_english("ＡＢＣ") == "ABC"  # NFKC
    assert D.normalize_chinese("你好 , 世界 !") == "你好，世界！"
    assert D.normalize_chinese("Tom  Jackson 是 DJ 。") == "Tom Jackson是DJ。"
    assert D.normalize_chinese("1,000个, 3:30（好）") == "1,000个，3:30（好）"
    assert D.normalize_chinese("「你好」﹐說") == "「你好」，說"
    with pytest.raises(TypeError, match="text"):
        D.normalize_english(3)


# ----------------------------------------------------------------------------- file resolution


def test_resolution_order_root_then_env_then_cache(isolated, tmp_path, monkeypatch):
    root, env = tmp_path / "root", tmp_path / "env"
    write_tatoeba(root, ["A.\t甲。"])
    write_tatoeba(env, ["B.\t乙。"])
    write_tatoeba(isolated, ["C.\t丙。"])  # the cache has the same layout
    monkeypatch.setenv("COURSE_LIB_DATA", str(env))
    assert D.load_tatoeba_en_zh(root, download=False) == [("A.", "甲。")]
    assert D.load_tatoeba_en_zh(download=False) == [("B.", "乙。")]
    monkeypatch.delenv("COURSE_LIB_DATA")
    assert D.load_tatoeba_en_zh(download=False) == [("C.", "丙。")]
    with pytest.warns(UserWarning, match="root= argument is set but"):
        assert D.load_tatoeba_en_zh(tmp_path / "empty", download=False) == [("C.", "丙。")]


def test_offline_without_copy_raises_clear_error(isolated, monkeypatch):
    url = closed_port_url()
    patch_tatoeba_sources(monkeypatch, D.Source(url, member="cmn.txt"))
    with pytest.raises(D.DataNotFoundError) as info:
        D.load_tatoeba_en_zh()
    err = info.value
    assert isinstance(err, RuntimeError)
    msg = str(err)
    assert "tatoeba-cmn-eng/cmn.txt" in msg  # the file
    assert url in msg  # the address tried
    assert str(isolated / "tatoeba-cmn-eng" / "cmn.txt") in msg  # where to put it: the cache
    assert "COURSE_LIB_DATA" in msg and "root=" in msg  # ... or a data folder
    assert err.cache_path == isolated / "tatoeba-cmn-eng" / "cmn.txt" and err.urls == (url,)
    assert files_under(isolated) == []
    with pytest.raises(D.DataNotFoundError, match="download=False"):
        D.load_tatoeba_en_zh(download=False)


def test_download_lands_in_cache_with_browser_user_agent(isolated, monkeypatch):
    body = big_tatoeba_bytes()
    with LocalServer({"/cmn.txt": (200, body)}) as server:
        patch_tatoeba_sources(monkeypatch, D.Source(server.url + "/cmn.txt", sha256=hashlib.sha256(body).hexdigest()))
        pairs = D.load_tatoeba_en_zh()
        assert len(server.requests) == 1
        assert server.requests[0][1].startswith("Mozilla/5.0")  # not python-requests
        again = D.load_tatoeba_en_zh()  # from the cache: no second request
        assert len(server.requests) == 1
    assert pairs == again and len(pairs) == 10_050 and pairs[0] == ("Sentence number 0.", "第0句。")
    cached = isolated / "tatoeba-cmn-eng" / "cmn.txt"
    assert files_under(isolated) == [cached] and cached.read_bytes() == body


def test_download_extracts_zip_member(isolated, monkeypatch):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("_about.txt", "about")
        zf.writestr("cmn.txt", big_tatoeba_bytes())
    with LocalServer({"/anki/cmn-eng.zip": (200, buf.getvalue())}) as server:
        patch_tatoeba_sources(monkeypatch, D.Source(server.url + "/anki/cmn-eng.zip", member="cmn.txt"))
        pairs = D.load_tatoeba_en_zh()
    assert len(pairs) == 10_050
    assert files_under(isolated) == [isolated / "tatoeba-cmn-eng" / "cmn.txt"]


@pytest.mark.parametrize(
    "status, body, sha, why",
    [
        (200, b"<html><body>Access denied</body></html>", None, "DataValidationError"),  # error page
        (200, big_tatoeba_bytes()[:-5000], "0" * 64, "sha256 mismatch"),  # truncated / corrupt
        (200, b"PK\x03\x04 not really a zip", None, "not a zip"),
        (403, b"forbidden", None, "403"),
    ],
)
def test_failed_download_leaves_no_cache_file(isolated, monkeypatch, status, body, sha, why):
    member = "cmn.txt" if why == "not a zip" else None
    with LocalServer({"/f": (status, body)}) as server:
        patch_tatoeba_sources(monkeypatch, D.Source(server.url + "/f", sha256=sha, member=member))
        with pytest.raises(D.DataNotFoundError, match=why):
            D.load_tatoeba_en_zh()
    assert files_under(isolated) == []
    assert not any(p.name.startswith(".download-") for p in isolated.rglob("*"))


def test_falls_back_to_second_source(isolated, monkeypatch):
    body = big_tatoeba_bytes()
    routes = {"/bad.zip": (200, b"<html>blocked</html>"), "/good.txt": (200, body)}
    with LocalServer(routes) as server:
        patch_tatoeba_sources(
            monkeypatch,
            D.Source(server.url + "/bad.zip", member="cmn.txt"),
            D.Source(server.url + "/good.txt", sha256=hashlib.sha256(body).hexdigest()),
        )
        assert len(D.load_tatoeba_en_zh()) == 10_050
        assert [p for p, _ in server.requests] == ["/bad.zip", "/good.txt"]


def test_resolve_file_rejects_non_spec():
    with pytest.raises(TypeError, match="spec"):
        D.resolve_file("tatoeba-cmn-eng/cmn.txt")


def test_import_does_no_work(tmp_path):
    cache = tmp_path / "never-created"
    env = {**os.environ, "COURSE_LIB_CACHE": str(cache), "COURSE_LIB_DATA": str(tmp_path / "missing")}
    code = "import course_lib.data as d; assert d.PAD_ID == 0"
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).resolve().parents[2])
    assert not cache.exists()


# ----------------------------------------------------------------------------- splits


def test_split_by_source_is_grouped_disjoint_and_deterministic():
    pairs = []
    for i in range(400):
        for j in range(1 + i % 3):  # up to three translations per sentence
            pairs.append((f"Sentence {i}." if j != 1 else f"sentence  {i}.", f"译文{i}-{j}"))
    train, valid, test = D.split_by_source(pairs, 0.1, 0.2, seed=1)
    assert sorted(train + valid + test) == sorted(pairs)
    keys = [{" ".join(p[0].split()).casefold() for p in part} for part in (train, valid, test)]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    assert 0.12 < len(test) / len(pairs) < 0.28 and 0.05 < len(valid) / len(pairs) < 0.15
    assert D.split_by_source(pairs, 0.1, 0.2, seed=1) == (train, valid, test)
    assert D.split_by_source(pairs, 0.1, 0.2, seed=2)[2] != test
    # a sentence keeps its split when other pairs are added or removed
    sub_test = D.split_by_source(pairs[::2], 0.1, 0.2, seed=1)[2]
    assert set(sub_test) == set(test) & set(pairs[::2])
    assert train == [p for p in pairs if p in set(train)]  # input order kept


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"valid_fraction": 1.0}, "valid_fraction"),
        ({"test_fraction": -0.1}, "test_fraction"),
        ({"valid_fraction": 0.6, "test_fraction": 0.5}, "valid_fraction \\+ test_fraction"),
        ({"seed": "x"}, "seed"),
    ],
)
def test_split_by_source_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        D.split_by_source([("a", "b")], **kwargs)


def test_group_by_source():
    assert D.group_by_source([("a", "1"), ("b", "2"), ("a", "3")]) == [("a", ["1", "3"]), ("b", ["2"])]


# ----------------------------------------------------------------------------- tokenizers

EN_TRAIN = [
    "Hello, world.",
    "Don't worry, be happy!",
    'He said "no" and left.',
    "The cat sat on the mat.",
    "It costs $5 at 3:30.",
] * 5
ZH_TRAIN = ["你好，世界。", "別擔心，要開心！", "他说“不”就走了。", "猫坐在垫子上。", "Tom在这儿。", "Tom Jackson是DJ。"]


def test_english_bpe_round_trip_with_curly_quotes():
    tok = D.train_bpe_tokenizer(EN_TRAIN, vocab_size=120)
    for text in ["Hello, world.", "Don’t worry, be happy!", "He said “no” and left.", "  The   cat sat.  "]:
        ids = tok.encode(text)
        assert ids[-1] == D.EOS_ID and D.BOS_ID not in ids
        assert tok.decode(ids) == D.normalize_english(text)
    assert tok.encode("Hello", add_bos=True, add_eos=False)[0] == D.BOS_ID
    assert tok.tokens("Hello, world.")[0].startswith("▁")
    assert tok.vocab_size == len(tok) <= 120  # fewer when the text allows fewer merges
    low = D.train_bpe_tokenizer(EN_TRAIN, vocab_size=120, lowercase=True)
    assert low.decode(low.encode("HELLO, World.")) == "hello, world."
    assert low.encode("Hello") == low.encode("hello") and tok.encode("Hello") != tok.encode("hello")


def test_chinese_char_round_trip_traditional_and_quotes():
    tok = D.train_char_tokenizer(ZH_TRAIN)
    assert tok.tokens("別擔心") == ["別", "擔", "心"]  # one token per character
    for text in ["別擔心，要開心！", "他说“不”就走了。", "你好 , 世界 !", "Tom Jackson是DJ。"]:
        ids = tok.encode(text)
        assert len(ids) == len(D.normalize_chinese(text)) + 1  # + <eos>
        assert tok.decode(ids) == D.normalize_chinese(text)  # no spaces inserted
    assert tok.encode("鑫") == [D.UNK_ID, D.EOS_ID]  # unseen character
    assert tok.decode(tok.encode("你鑫")) == "你<unk>"


def test_decode_skips_specials_and_stops_at_eos():
    tok = D.train_char_tokenizer(ZH_TRAIN)
    ni, hao = tok.token_to_id("你"), tok.token_to_id("好")
    ids = [D.BOS_ID, ni, hao, D.EOS_ID, ni, D.PAD_ID]
    assert tok.decode(ids) == "你好"
    assert tok.decode(torch.tensor(ids)) == "你好"
    assert tok.decode(ids, stop_at_eos=False) == "你好你"
    assert tok.decode_batch(torch.tensor([ids, [ni, D.EOS_ID, 0, 0, 0, 0]])) == ["你好", "你"]
    with pytest.raises(ValueError, match="outside"):
        tok.decode([tok.vocab_size])
    with pytest.raises(ValueError, match="1-D"):
        tok.decode(torch.tensor([ids]))
    with pytest.raises(TypeError, match="text"):
        tok.encode(None)


def test_tokenizer_save_load_round_trip(tmp_path):
    pairs = list(zip(EN_TRAIN, ZH_TRAIN * 5))
    src, tgt = D.train_tokenizers(pairs, src_vocab_size=100)
    assert (src.kind, tgt.kind) == ("bpe", "char")
    for tok, text in ((src, "Don’t worry, be happy!"), (tgt, "別擔心，要開心！")):
        back = D.TextTokenizer.from_json(tok.to_json())
        assert back == tok and back.kind == tok.kind and back.vocab_size == tok.vocab_size
        assert back.encode(text) == tok.encode(text) and back.decode(back.encode(text)) == tok.decode(tok.encode(text))
        path = tmp_path / f"{tok.kind}.json"
        tok.save(path)
        loaded = D.TextTokenizer.load(path)
        assert loaded.encode(text) == tok.encode(text)
    # a checkpoint holds the JSON string
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"src_tokenizer": src.to_json()}, ckpt)
    assert D.TextTokenizer.from_json(torch.load(ckpt)["src_tokenizer"]) == src
    with pytest.raises(ValueError, match="TextTokenizer"):
        D.TextTokenizer.from_json('{"model": {}}')
    with pytest.raises(ValueError, match="JSON"):
        D.TextTokenizer.from_json("not json")


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda: D.train_bpe_tokenizer(EN_TRAIN, vocab_size=4), ValueError, "vocab_size"),
        (lambda: D.train_bpe_tokenizer("one string"), TypeError, "texts"),
        (lambda: D.train_bpe_tokenizer([]), ValueError, "texts"),
        (lambda: D.train_char_tokenizer(ZH_TRAIN, min_frequency=0), ValueError, "min_frequency"),
        (lambda: D.train_tokenizers([("a", "b")], src_kind="word"), ValueError, "src_kind"),
        (lambda: D.train_tokenizers([]), ValueError, "pairs"),
    ],
)
def test_tokenizer_bad_arguments(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


# ----------------------------------------------------------------------------- batches


def test_shift_right_values():
    tgt = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    assert torch.equal(D.shift_right(tgt, bos_id=1), torch.tensor([[1, 5, 6, 7], [1, 8, 2, 0]]))
    assert torch.equal(D.shift_right(tgt, bos_id=1, pad_id=0), torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0]]))
    assert torch.equal(tgt, torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]]))  # input untouched
    with pytest.raises(ValueError, match="tgt"):
        D.shift_right(torch.tensor([1, 2]), 1)
    with pytest.raises(ValueError, match="tgt"):
        D.shift_right(torch.zeros(2, 3), 1)


def test_collate_batch_shapes_values_and_masks():
    items = [(torch.tensor([4, 5, 6, 2]), torch.tensor([7, 8, 2])), (torch.tensor([9, 2]), torch.tensor([10, 11, 12, 13, 2]))]
    b = D.collate_batch(items)
    assert b.src.shape == (2, 4) and b.tgt_in.shape == (2, 5) and b.tgt_out.shape == (2, 5)
    assert b.src.dtype == b.tgt_in.dtype == b.tgt_out.dtype == torch.long
    assert b.src.tolist() == [[4, 5, 6, 2], [9, 2, 0, 0]]
    assert b.tgt_out.tolist() == [[7, 8, 2, 0, 0], [10, 11, 12, 13, 2]]
    assert b.tgt_in.tolist() == [[1, 7, 8, 0, 0], [1, 10, 11, 12, 13]]
    assert b.src_mask.shape == (2, 1, 1, 4) and b.src_mask.dtype == torch.bool
    assert torch.equal(b.src_mask, padding_mask(b.src, D.PAD_ID))
    assert b.src_mask[1, 0, 0].tolist() == [True, True, False, False]
    assert b.tgt_mask.shape == (2, 1, 5, 5) and b.tgt_mask.dtype == torch.bool
    assert torch.equal(b.tgt_mask, decoder_self_attention_mask(b.tgt_in, D.PAD_ID))
    assert not b.tgt_mask[1, 0, 0, 1]  # causal
    assert b.n_tokens == 8 and b.size == 2
    moved = b.to("cpu")
    assert isinstance(moved, D.Batch) and moved.n_tokens == 8 and torch.equal(moved.tgt_in, b.tgt_in)
    with pytest.raises(ValueError, match="items"):
        D.collate_batch([])


def test_dataset_from_pairs_and_length_filter():
    pairs = list(zip(EN_TRAIN[:5], ZH_TRAIN[:5]))
    src, tgt = D.train_tokenizers(pairs * 3, src_vocab_size=100)
    full = D.TranslationDataset.from_pairs(pairs, src, tgt)
    assert len(full) == 5 and full.pairs == pairs
    s0, t0 = full[0]
    assert s0.tolist() == src.encode(pairs[0][0]) and t0.tolist() == tgt.encode(pairs[0][1])
    assert s0[-1] == t0[-1] == D.EOS_ID and t0[0] != D.BOS_ID
    limit = sorted(len(src.encode(p[0])) for p in pairs)[2]
    short = D.TranslationDataset.from_pairs(pairs, src, tgt, max_src_len=limit)
    assert 0 < len(short) < 5 and all(s <= limit for s, _ in short.lengths)
    assert short.pairs == [p for p in pairs if len(src.encode(p[0])) <= limit]
    assert all(short[i][0].tolist() == src.encode(p[0]) for i, p in enumerate(short.pairs))
    with pytest.raises(ValueError, match="max_tgt_len"):
        D.TranslationDataset.from_pairs(pairs, src, tgt, max_tgt_len=1)
    with pytest.raises(TypeError, match="src_tokenizer"):
        D.TranslationDataset.from_pairs(pairs, "tok", tgt)


def _lengths(n=2000, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 60, (n,), generator=g).tolist()


def test_bucketing_reduces_padding_versus_random_batches():
    lengths = _lengths()
    bucketed = list(D.BucketBatchSampler(lengths, batch_size=32, bucket_size_multiplier=20, seed=0))
    perm = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(0)).tolist()
    random_batches = [perm[i : i + 32] for i in range(0, len(perm), 32)]
    pad_bucketed = D.padding_fraction(lengths, bucketed)
    pad_random = D.padding_fraction(lengths, random_batches)
    assert pad_random > 0.3  # random batches of lengths 2..59 waste a lot
    assert pad_bucketed < 0.2 * pad_random  # measured: about 0.03 vs 0.48


def test_bucket_sampler_deterministic_complete_and_reshuffled():
    lengths = _lengths(1000)
    a = D.BucketBatchSampler(lengths, 16, bucket_size_multiplier=10, seed=3)
    b = D.BucketBatchSampler(lengths, 16, bucket_size_multiplier=10, seed=3)
    epoch0, epoch1 = list(a), list(a)
    assert epoch0 == list(b) and epoch1 == list(b)  # same seed: same sequence of epochs
    assert epoch0 != epoch1  # but each epoch differs
    for epoch in (epoch0, epoch1):
        assert sorted(i for batch in epoch for i in batch) == list(range(1000))  # every example once
        assert len(epoch) == len(a) == 63
    a.set_epoch(1)
    assert list(a) == epoch1
    assert list(D.BucketBatchSampler(lengths, 16, seed=4)) != epoch0
    fixed = D.BucketBatchSampler(lengths, 16, shuffle=False)
    assert list(fixed) == list(fixed)
    dropped = D.BucketBatchSampler(lengths, 16, bucket_size_multiplier=10, drop_last=True)
    assert all(len(batch) == 16 for batch in dropped) and len(list(dropped)) == len(dropped)
    with pytest.raises(ValueError, match="batch_size"):
        D.BucketBatchSampler(lengths, 0)


def test_synthetic_copy_task_is_deterministic():
    a = D.synthetic_copy_task(50, 3, 9, vocab_size=20, seed=7)
    assert a == D.synthetic_copy_task(50, 3, 9, vocab_size=20, seed=7)
    assert a != D.synthetic_copy_task(50, 3, 9, vocab_size=20, seed=8)
    assert all(src == tgt for src, tgt in a)
    assert all(3 <= len(src) <= 9 and all(4 <= t < 20 for t in src) for src, _ in a)
    assert {len(src) for src, _ in a} == set(range(3, 10))
    rev = D.synthetic_copy_task(50, 3, 9, vocab_size=20, reverse=True, seed=7)
    assert [s for s, _ in rev] == [s for s, _ in a] and all(t == s[::-1] for s, t in rev)
    with pytest.raises(ValueError, match="vocab_size"):
        D.synthetic_copy_task(5, 1, 3, vocab_size=4)
    with pytest.raises(ValueError, match="max_len"):
        D.synthetic_copy_task(5, 4, 3, vocab_size=10)


def test_make_loader_on_synthetic_task():
    ds = D.TranslationDataset.from_ids(D.synthetic_copy_task(100, 2, 12, vocab_size=30, seed=0))
    assert ds[0][0][-1] == D.EOS_ID and ds.pairs is None
    loader = D.make_loader(ds, batch_size=16, seed=0)
    batches = list(loader)
    assert len(batches) == len(loader) == 7
    assert sum(b.size for b in batches) == 100
    for b in batches:
        assert (b.tgt_in[:, 0] == D.BOS_ID).all()
        assert torch.equal(b.src, b.tgt_out)  # copy task: target = source
        assert torch.equal(b.tgt_in, D.shift_right(b.tgt_out, D.BOS_ID, D.PAD_ID))
    ordered = list(D.make_loader(ds, batch_size=16, shuffle=False, bucket=False))
    assert ordered[0].src[0, : len(ds[0][0])].tolist() == ds[0][0].tolist()


def test_data_config_validates():
    with pytest.raises(ValueError, match="dataset"):
        D.DataConfig(dataset="wmt14")
    with pytest.raises(ValueError, match="batch_size"):
        D.DataConfig(batch_size=0)
    with pytest.raises(ValueError, match="max_src_len"):
        D.DataConfig(max_src_len=1)
    cfg = D.DataConfig(max_src_len=16)
    assert D.DataConfig(**cfg.to_dict()) == cfg


# ----------------------------------------------------------------------------- real data

REAL = os.environ.get("COURSE_LIB_DATA")
real_data = pytest.mark.skipif(not REAL, reason="set COURSE_LIB_DATA to a folder with the real data sets")


@pytest.fixture(scope="module")
def tatoeba():
    return D.load_tatoeba_en_zh(REAL, with_attribution=True, download=False)


@real_data
def test_real_tatoeba(tatoeba):
    assert len(tatoeba) == 29_155
    assert tatoeba[0] == ("Hi.", "嗨。", "CC-BY 2.0 (France) Attribution: tatoeba.org #538123 (CM) & #891077 (Martha)")
    assert all(en and zh and attr.startswith("CC-BY 2.0") for en, zh, attr in tatoeba)
    assert len({en for en, _, _ in tatoeba}) == 27_661
    zh_chars = {c for _, zh, _ in tatoeba for c in zh}
    assert not zh_chars & set("?!()\u200b\u3000")  # normalised: full-width punctuation, no odd spaces
    spaced = [zh for _, zh, _ in tatoeba if " " in zh]  # only between Latin letters/digits
    assert 0 < len(spaced) < 10 and all(re.fullmatch(r"([^ ]*[A-Za-z0-9] [A-Za-z0-9])*[^ ]*", zh) for zh in spaced)
    en_chars = {c for en, _, _ in tatoeba for c in en}
    assert not en_chars & set("‘’“”")


@real_data
def test_real_tatoeba_default_split(tatoeba):
    pairs = [t[:2] for t in tatoeba]
    train, valid, test = D.split_by_source(pairs)
    assert len(test) >= 1_000 and len(valid) >= 1_000
    assert (len(train), len(valid), len(test)) == (26_175, 1_452, 1_528)
    train_en = {en.casefold() for en, _ in train}
    assert not any(en.casefold() in train_en for en, _ in test + valid)


@real_data
def test_real_tatoeba_tokenizers_and_loaders(tatoeba):
    pairs = [t[:2] for t in tatoeba]
    for en, zh in pairs[::97]:  # the tokenizers' normalisers agree with the loader's
        assert D.normalize_english(en) == en and D.normalize_chinese(zh) == zh
    data = D.make_dataloaders(D.DataConfig(max_src_len=16, max_tgt_len=24), root=REAL, download=False)
    assert data.src_tokenizer.vocab_size == 4000 and 2_500 < data.tgt_tokenizer.vocab_size < 3_000
    assert len(data.test) >= 1_000
    for ds in (data.train, data.valid, data.test):  # the same filter on every split
        assert max(s for s, _ in ds.lengths) <= 16 and max(t for _, t in ds.lengths) <= 24
    batch = next(iter(data.train_loader))
    assert batch.src.shape[0] == 128 and batch.src.shape[1] <= 16 and batch.tgt_out.shape[1] <= 24
    en, zh = data.test.pairs[0]
    src, tgt = data.test[0]
    assert data.src_tokenizer.decode(src) == en and data.tgt_tokenizer.decode(tgt) == zh
    assert "padding" in data.summary()


@real_data
def test_real_tiny_shakespeare():
    text = D.load_tiny_shakespeare(REAL, download=False)
    assert len(text) == 1_115_394 and len(set(text)) == 65 and text.startswith("First Citizen:")


@real_data
def test_real_multi30k():
    sizes = {s: len(D.load_multi30k(s, REAL, download=False)) for s in ("train", "val", "test")}
    assert sizes == {"train": 29_000, "val": 1_014, "test": 1_000}
    assert D.load_multi30k("valid", REAL, download=False)[1] == (
        "Ein Mann schläft in einem grünen Raum auf einem Sofa.",
        "A man sleeping in a green room on a couch.",
    )
    with pytest.raises(ValueError, match="split"):
        D.load_multi30k("dev", REAL)
