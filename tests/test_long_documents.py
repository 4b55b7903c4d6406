"""``config.data.long_documents='split'``: unlabelled documents longer than
``data.max_tokens`` become consecutive pieces (every token kept) in the loaders and in
``Predictor.evaluate``, and the config refuses it where it cannot mean that."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import load_config, local_config
from longtext_jax import config as config_lib
from longtext_jax import data, inference, tasks
from longtext_jax.data import tokenizers
from longtext_jax.data import text as text_lib

BYTES = tokenizers.ByteTokenizer()


def _encoder(max_tokens, specials=True, layout="none", long_documents="split"):
  return text_lib.TextEncoder(BYTES, layout, 0, text_lib.LabelVocab(None), max_tokens,
                              specials, long_documents=long_documents)


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=80), st.integers(3, 40), st.booleans())
def test_pieces_are_the_document_in_order_each_within_max_tokens(text, max_tokens, specials):
  enc = _encoder(max_tokens, specials)
  stats = text_lib.LoadStats()
  pieces = enc.encode_all({"text": text, "where": "d.txt"}, stats)
  ids = BYTES.encode(text)
  body = max_tokens - (2 if specials else 0)
  edge = 1 if specials else 0
  bodies = [p["input_ids"][edge:len(p["input_ids"]) - edge] for p in pieces]
  if len(ids):
    np.testing.assert_array_equal(np.concatenate(bodies), ids)  # Nothing lost or repeated.
  assert len(pieces) == max(1, -(-len(ids) // body))
  for p in pieces:
    assert 1 <= len(p["input_ids"]) <= max_tokens and p["mask"].all()
    if specials:
      assert (p["input_ids"][0], p["input_ids"][-1]) == (BYTES.cls_id, BYTES.sep_id)
  assert (stats.examples, stats.truncated, stats.split_documents) == (
      len(pieces), 0, int(len(pieces) > 1))
  assert stats.max_tokens_seen == len(ids) + (2 if specials else 0)
  if len(pieces) == 1:  # A document that fits: exactly what the cutting encoder gives.
    whole = _encoder(max_tokens, specials, long_documents="cut")({"text": text})
    assert whole.keys() == pieces[0].keys()
    for k in whole:
      np.testing.assert_array_equal(whole[k], pieces[0][k])


def test_cut_keeps_one_example_and_split_refuses_labels_and_pairs():
  text = "x" * 30
  cut = _encoder(10, long_documents="cut").encode_all({"text": text})
  assert len(cut) == 1 and len(cut[0]["input_ids"]) == 10
  assert len(_encoder(10).encode_all({"text": text})) == 4  # 30 bytes, 8 a piece.
  assert len(_encoder(0).encode_all({"text": text})) == 1  # max_tokens 0: whole.
  with pytest.raises(ValueError, match=r"f\.jsonl:3: .*'split' is for unlabelled text"):
    _encoder(10, layout="label").encode_all({"text": text, "label": 0, "where": "f.jsonl:3"})
  with pytest.raises(ValueError, match=r"f\.jsonl:4: .*cannot split a text pair"):
    _encoder(10).encode_all({"text": text, "text_pair": "y", "where": "f.jsonl:4"})
  with pytest.raises(ValueError, match="max_tokens=2 leaves no room"):
    _encoder(2).encode_all({"text": text})
  with pytest.raises(ValueError, match="long_documents must be one of"):
    _encoder(10, long_documents="chunk")


def _lm_config(tmp_path, lengths, max_tokens=40, long_documents="split"):
  """RAN's WikiText-103 config at its tiny size on a text folder of byte documents."""
  rng = np.random.default_rng(0)
  for split in ("train", "eval"):
    folder = tmp_path / split
    folder.mkdir(exist_ok=True)
    for i, n in enumerate(lengths):
      words = rng.choice(["alpha", "beta", "gamma", "delta"], size=n)
      (folder / f"{i:02d}.txt").write_text(" ".join(words)[:n], encoding="utf-8")
  c = load_config("ran/paper.py", "wikitext103,tiny")
  c.unlock()
  c.data.train_path, c.data.eval_path = str(tmp_path / "train"), str(tmp_path / "eval")
  c.data.max_tokens = max_tokens
  c.data.long_documents = long_documents
  c.data.eval_batch_size = 4
  return c


def test_the_wikitext_config_splits_its_articles_and_names_each_piece(tmp_path):
  assert load_config("ran/paper.py", "wikitext103").data.long_documents == "split"
  assert load_config("ran/paper.py", "arxiv").data.long_documents == "cut"
  c = _lm_config(tmp_path, [10, 38, 39, 100])
  splits = data.build_splits(c, tasks.get_task(c.task))
  train = splits["train"]
  # 38 bytes per piece: 10 -> 1, 38 -> 1, 39 -> 2, 100 -> 3.
  assert len(train) == 7 and train.stats.split_documents == 2
  assert train.stats.truncated == 0
  assert [w.rsplit("/", 1)[-1] for w in train.where] == [
      "00.txt", "01.txt", "02.txt (piece 1 of 2)", "02.txt (piece 2 of 2)",
      "03.txt (piece 1 of 3)", "03.txt (piece 2 of 3)", "03.txt (piece 3 of 3)"]
  bodies = [BYTES.decode(train[i]["input_ids"][1:-1]) for i in (4, 5, 6)]
  assert "".join(bodies) == (tmp_path / "train" / "03.txt").read_text(encoding="utf-8")
  c.data.long_documents = "cut"
  assert len(data.build_splits(c, tasks.get_task(c.task))["train"]) == 4


def test_evaluate_reads_every_piece_as_the_training_loader_does(tmp_path):
  c = _lm_config(tmp_path, [20, 75, 130])
  c.lock()
  p = inference.Predictor.from_config(c)
  from_file = p.evaluate(str(tmp_path / "eval"))
  loader = data.build_splits(c, tasks.get_task(c.task))["eval"]
  from_loader = p.evaluate(loader)
  assert from_file["num_examples"] == len(loader) == 1 + 2 + 4
  assert from_file["truncated"] == 0
  for k, v in from_loader["metrics"].items():
    assert from_file["metrics"][k] == pytest.approx(v, rel=1e-6), k
  # Cutting instead reads fewer tokens: another loss over 3 examples.
  c_cut = c.copy_and_resolve_references()
  c_cut.unlock()
  c_cut.data.long_documents = "cut"
  result = inference.Predictor.from_config(c_cut, p.params).evaluate(str(tmp_path / "eval"))
  assert result["num_examples"] == 3 and result["truncated"] == 2


@pytest.mark.parametrize("change, message", [
    (dict(max_tokens=0), "needs config.data.max_tokens > 0"),
    (dict(name="pydoc_mlm"), "cuts its documents into rows of data.seq_len itself"),
    (dict(name="tfds", tfds_name="imdb_reviews"), "needs the examples in memory"),
    (dict(long_documents="chunks"), r"choose one of \['cut', 'split'\]"),
])
def test_the_config_refuses_split_where_it_means_nothing(change, message):
  c = local_config("lm", 2, max_tokens=64, long_documents="split")
  for k, v in change.items():
    setattr(c.data, k, v)
  with pytest.raises(ValueError, match=message):
    config_lib.validate(c, tasks.get_task(c.task))


def test_the_config_refuses_split_for_a_labelled_task():
  c = local_config("classification", 2, max_tokens=64, long_documents="split")
  with pytest.raises(ValueError, match="task 'classification' has a label per document"):
    config_lib.validate(c, tasks.get_task(c.task))
  c.task.name = "lm"
  problems = ""
  try:
    config_lib.validate(c, tasks.get_task(c.task))
  except ValueError as e:  # (The tiny Transformer is not causal: that problem is listed.)
    problems = str(e)
  assert "needs a causal encoder" in problems and "long_documents" not in problems


def test_the_config_and_the_encoder_accept_the_same_values():
  """The values are listed twice (the layering keeps the data room from importing the
  config): validate()'s CHOICES and TextEncoder's own check must not drift apart, or a
  value would pass one and fail the other."""
  assert tuple(config_lib.CHOICES["data.long_documents"]) == tuple(text_lib.LONG_DOCUMENTS)
