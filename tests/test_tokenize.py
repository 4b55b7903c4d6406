"""SentencePiece training/loading with fixed special ids; the tokenize CLI; the corpora."""
import io
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from conftest import ROOT
from longtext_jax import tokenize
from longtext_jax.data import corpus
from longtext_jax.data.sentencepiece_tokenizer import (SentencePieceTokenizer, sample_lines,
                                                       train_sentencepiece)
from longtext_jax.data.tokenizers import SPECIAL_IDS, Tokenizer

WORDS = ("graph recurrent network sentence node token state gate cell hidden window step "
         "layer parameter shared softmax forget input output memory neighbour").split()


def _generated_text(num_lines=400, seed=0):
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(WORDS, size=rng.integers(4, 12))) + "." for _ in range(num_lines)]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
  folder = tmp_path_factory.mktemp("text")
  (folder / "a.txt").write_text("\n".join(_generated_text(300, 0)), encoding="utf-8")
  (folder / "sub").mkdir()
  (folder / "sub" / "b.txt").write_text("\n".join(_generated_text(300, 1)), encoding="utf-8")
  prefix = str(tmp_path_factory.mktemp("spm") / "tiny")
  assert tokenize.main(["train", "--input", str(folder), "--vocab_size", "60",
                        "--output", prefix]) == 0
  return prefix + ".model"


def test_cli_model_has_fixed_special_ids_and_round_trips(model_file, capsys):
  tok = SentencePieceTokenizer(model_file)
  assert isinstance(tok, Tokenizer)
  assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
  assert tok.pieces([0, 1, 2, 3, 4]) == ["<pad>", "<unk>", "<s>", "</s>", "<mask>"]
  assert 20 < tok.vocab_size <= 60
  text = "the sentence node gate shared with token state."
  ids = tok.encode(text)
  assert ids.dtype == np.int32 and ids.ndim == 1
  assert not np.isin(ids, [0, 2, 3, 4]).any()  # no special token added by encode
  assert tok.decode(ids) == text
  # Special tokens are dropped by decode.
  assert tok.decode(np.concatenate([[2], ids, [3, 0, 0]])) == text
  # Word starts: a piece beginning with '▁' (every word of the text starts one).
  starts = tok.word_starts(ids)
  assert starts.sum() == len(text.split())
  assert tok.decode(tok.encode("gate vvv")) == "gate  \u2047 "  # unknown letters
  assert all(p.startswith("\u2581") == s for p, s in zip(tok.pieces(ids), starts))
  tokenize.main(["encode", "--model", model_file, "gate cell"])
  assert "\u2581gate" in capsys.readouterr().out


def test_encode_pair_format_and_truncation(model_file):
  tok = SentencePieceTokenizer(model_file)
  a, b = tok.encode("token state gate"), tok.encode("window step layer parameter shared")
  pair = tok.encode_pair("token state gate", "window step layer parameter shared")
  np.testing.assert_array_equal(pair, np.concatenate([[2], a, [3], b, [3]]))
  cut = tok.encode_pair("token state gate", "window step layer parameter shared", max_len=8)
  assert len(cut) == 8 and cut[0] == 2 and cut[-1] == 3 and (cut == 3).sum() == 2
  single = tok.encode_pair("token state gate")
  np.testing.assert_array_equal(single, np.concatenate([[2], a, [3]]))


def test_train_from_iterable_bytes_and_wrong_ids_rejected(tmp_path):
  proto = train_sentencepiece(iter(_generated_text(200, 2)), vocab_size=40)
  tok = SentencePieceTokenizer(proto)
  assert tok.mask_id == SPECIAL_IDS["mask"] and tok.encode("gate").size >= 1
  # A model trained with SentencePiece's default ids (unk=0, <s>=1, </s>=2) is refused.
  buf = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(_generated_text(200, 3)),
                                 model_writer=buf, vocab_size=40, minloglevel=2)
  with pytest.raises(ValueError, match="id"):
    SentencePieceTokenizer(buf.getvalue())
  with pytest.raises(ValueError, match="does not exist"):
    SentencePieceTokenizer(str(tmp_path / "missing.model"))
  with pytest.raises(ValueError, match="vocab_size"):
    train_sentencepiece(["a b"], vocab_size=5)


def test_sample_lines_seeded_uniform_in_order():
  lines = [f"line {i}" for i in range(400)]
  sample, n = sample_lines(iter(lines), 100, seed=0)  # a generator, read once
  assert n == 400 and len(sample) == 100 and len(set(sample)) == 100
  positions = [int(s.split()[1]) for s in sample]
  assert positions == sorted(positions)  # the input order
  assert sample_lines(lines, 100, seed=0) == (sample, 400)
  assert sample_lines(lines, 100, seed=1)[0] != sample
  # k lines or fewer: all of them, unchanged, whatever the seed.
  assert sample_lines(lines[:60], 100, seed=3) == (lines[:60], 60)
  assert sample_lines(lines[:100], 100, seed=3) == (lines[:100], 100)
  assert sample_lines([], 5) == ([], 0)
  with pytest.raises(ValueError, match="k"):
    sample_lines(lines, 0)
  # Uniform: over many seeds each line is kept k/n of the time (sd of each rate ~0.009).
  counts = np.zeros(50)
  for seed in range(2000):
    counts[sample_lines(range(50), 10, seed)[0]] += 1
  np.testing.assert_allclose(counts / 2000, 10 / 50, atol=0.05)
  # n >> k (long skips): each tenth of the input holds a tenth of the sample (sd ~3%).
  tenths = np.zeros(10)
  for seed in range(500):
    tenths += np.bincount(np.asarray(sample_lines(range(2000), 20, seed)[0]) // 200, minlength=10)
  np.testing.assert_allclose(tenths / (500 * 20), 0.1, rtol=0.15)


_TRAIN_IN_SUBPROCESS = """
import sys
from longtext_jax.data.sentencepiece_tokenizer import train_sentencepiece
lines = open(sys.argv[1], encoding="utf-8").read().split("\\n")
open(sys.argv[2], "wb").write(train_sentencepiece(lines, 100, max_sentences=120))
"""


def _trainer_spec(proto: bytes):
  model = sentencepiece_model_pb2.ModelProto()
  model.ParseFromString(proto)
  return model.trainer_spec


def test_train_sentencepiece_sample_is_seeded(tmp_path):
  """Above max_sentences the lines are sampled from ``seed``: the same model in every process.

  SentencePiece's own sampling (shuffle_input_sentence) draws from a generator seeded once per
  process, so a second process got another vocabulary.
  """
  rng = np.random.default_rng(0)
  lexicon = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(3, 9)))
             for _ in range(300)]
  lines = [" ".join(rng.choice(lexicon, size=rng.integers(4, 12))) for _ in range(400)]
  (tmp_path / "corpus.txt").write_text("\n".join(lines), encoding="utf-8")
  r = subprocess.run([sys.executable, "-c", _TRAIN_IN_SUBPROCESS, str(tmp_path / "corpus.txt"),
                      str(tmp_path / "other_process.model")], cwd=ROOT, capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  proto = train_sentencepiece(iter(lines), 100, max_sentences=120)
  assert (tmp_path / "other_process.model").read_bytes() == proto
  assert train_sentencepiece(lines, 100, max_sentences=120, seed=1) != proto
  spec = _trainer_spec(proto)  # SentencePiece takes the whole sample as given
  assert not spec.shuffle_input_sentence and spec.input_sentence_size == 0
  # Below the cap: every line, the seed plays no part, SentencePiece's options as before.
  below = train_sentencepiece(lines, 100, max_sentences=400)
  assert train_sentencepiece(lines, 100, max_sentences=400, seed=1) == below != proto
  spec = _trainer_spec(below)
  assert spec.shuffle_input_sentence and spec.input_sentence_size == 400
  for bad in (-1, 100):  # SentencePiece's own limit: 0 (all) or more than 100
    with pytest.raises(ValueError, match="max_sentences"):
      train_sentencepiece(lines, 100, max_sentences=bad)


def test_corpora(tmp_path):
  docs = corpus.pydoc_topics()
  assert len(docs) > 20 and all(isinstance(d, str) and d for d in docs)
  assert docs == corpus.pydoc_topics()  # deterministic order
  (tmp_path / "x.txt").write_text("first doc\nline two\n", encoding="utf-8")
  (tmp_path / "y.txt").write_text("second\n\nthird\n", encoding="utf-8")
  assert corpus.text_folder(str(tmp_path)) == ["first doc\nline two\n", "second\n\nthird\n"]
  assert corpus.text_folder(str(tmp_path), one_per_line=True) == [
      "first doc", "line two", "second", "third"]
  with pytest.raises(ValueError, match="no files"):
    corpus.text_folder(str(tmp_path), pattern="*.md")
  train, evaluation = corpus.split_documents(docs)
  assert len(train) + len(evaluation) == len(docs) and not set(train) & set(evaluation)


def test_tfds_corpus_never_downloads(tmp_path):
  with pytest.raises(ValueError, match="not prepared"):
    corpus.tfds_text("lm1b", data_dir=str(tmp_path))


def test_a_tokenizer_a_run_trained_warns_when_loaded_for_other_documents(tmp_path, caplog):
  """get_tokenizer trains a missing config.data.tokenizer.path on the run's documents (a
  ',tiny' smoke test trains one on its small corpus); a later run for other documents used
  to load it silently. It now warns, naming the file; the same documents load quietly, and
  a tokenizer made by `tokenize train` (no record) too."""
  from longtext_jax.data import mlm  # pylint: disable=import-outside-toplevel
  small = [f"the cat {i} sat on the mat number {i % 7}" for i in range(200)]
  other = [f"a dog {i} ran in the park {i % 5} today" for i in range(200)]
  path = str(tmp_path / "spm" / "en.model")
  mlm.get_tokenizer(path, small, 60)
  assert (tmp_path / "spm" / "en.trained_on.json").is_file()
  caplog.clear()
  mlm.get_tokenizer(path, small, 60)
  assert "trained by an earlier run" not in caplog.text
  mlm.get_tokenizer(path, other, 60)
  assert f"config.data.tokenizer.path={path} was trained by an earlier run on other " \
         "documents (200 documents, vocab 60" in caplog.text
  (tmp_path / "spm" / "en.trained_on.json").unlink()
  caplog.clear()
  mlm.get_tokenizer(path, other, 60)
  assert "trained by an earlier run" not in caplog.text
