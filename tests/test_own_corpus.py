"""Your own documents with any encoder: configs/text_classification.py:local,encoder=<name>.

A generated corpus in the JSONL format of docs/own_corpus.md (tests/own_corpus_data.py, no
downloads). End-to-end runs are in-process and tiny; every encoder's run is here, the slower
marked ``long`` (10-20 s of CPU each); unmarked tests cover every piece: every encoder's
config is prepared and validated, the loop stops early and evaluates the test split with the
best checkpoint (with a stand-in step), tokenizers are trained and cached, splits are
stratified.
"""
import collections
import dataclasses
import json
import os
import shutil

import jax
import ml_collections
import numpy as np
import pytest

from conftest import load_config
from configs import text_classification
import hf_folders
import own_corpus_data
from longtext_jax import config as config_lib
from longtext_jax import data as data_lib
from longtext_jax import encoders
from longtext_jax import inference
from longtext_jax import tasks as tasks_lib
from longtext_jax import train
from longtext_jax.data import local_files, pipeline, tokenizers
from longtext_jax.encoders.bert_baselines import ToBert
from longtext_jax.encoders.chunk_bert import ChunkBert
from longtext_jax.train import init_from
from longtext_jax.train import prepare



@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """train.jsonl (16 documents per class) and test.jsonl (4 per class), 5 classes."""
  return own_corpus_data.write_corpus(str(tmp_path_factory.mktemp("corpus")))


def _local(corpus, arg="", **fields):
  c = load_config("text_classification.py", "local,tiny" + ("," + arg if arg else ""))
  c.data.train_path = corpus["train"]
  c.train.progress_bar = False
  for dotted, value in fields.items():
    *path, last = dotted.split("__")
    node = c
    for key in path:
      node = node[key]
    node[last] = value
  return c


def test_every_encoder_config_prepares_and_validates(corpus, tmp_path):
  """Every registered encoder has a 'local' config whose data-dependent fields are filled
  from the corpus (5 classes, a trained vocabulary) and that validates, and whose model
  builds and runs (abstractly: shapes only) on a batch of 300 tokens; one trained tokenizer
  serves them all (cached in the shared workdir). The trained end-to-end run of each encoder
  is test_every_encoder_trains_end_to_end."""
  from longtext_jax.model import build_model  # pylint: disable=import-outside-toplevel
  for name in sorted(encoders.ENCODERS):
    c = prepare.prepare_config(_local(corpus, f"encoder={name}"), str(tmp_path))
    config_lib.validate(c)
    assert c.model.encoder.name == name and c.task.num_classes == 5
    model = build_model(c)
    batch = inference.example_batch(c, tasks_lib.get_task(c.task), length=300)
    out = jax.eval_shape(lambda: model.apply(model.init(jax.random.key(0), batch), batch,
                                             train=True, rngs={"dropout": jax.random.key(1)}))
    assert out["logits"].shape == (1, 5), (name, out["logits"].shape)
    tok = tokenizers.build_tokenizer(c.data.tokenizer)
    assert c.model.vocab_size == tok.vocab_size <= 300
    if name in ("chunk_bert", "bert_first", "bert_random", "tobert"):
      assert c.model.input == "ids" and c.model.encoder.vocab_size == tok.vocab_size
      assert (c.model.encoder.cls_id, c.model.encoder.sep_id) == (tok.cls_id, tok.sep_id)
  assert [f for f in os.listdir(tmp_path / prepare.TOKENIZER_DIR) if f.endswith(".model")] == [
      "sentencepiece-300.model"]


def test_a_checkpoint_folder_gives_its_own_special_ids_and_a_mismatch_is_an_error(
    corpus, tmp_path):
  """A HF folder whose vocabulary puts [CLS]/[SEP] at 2/3 (PubMedBERT does; BERT's uncased
  vocabulary at 101/102): the pretrained encoders' config takes the folder's ids; a config
  whose vocabulary size is below its tokenizer's stops before training (an id past the table
  would embed as NaN), one whose ids disagree with the folder's when the weights are loaded
  (a wrong [CLS] reads as another word)."""
  folder = tmp_path / "bert"
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [chr(97 + i) for i in range(26)]
  hf_folders.write_folder(folder, dict(hf_folders.TINY, max_position_embeddings=128),
                          scale=0.02, vocab=vocab)
  for name in ("chunk_bert", "bert_first", "bert_random", "tobert"):
    c = _local(corpus, f"encoder={name},pretrained={folder}")
    assert (c.model.encoder.cls_id, c.model.encoder.sep_id) == (2, 3), name
    prepared = prepare.prepare_config(c, str(tmp_path))
    assert prepared.model.vocab_size == len(vocab) == prepared.model.encoder.vocab_size
  c = _local(corpus, f"encoder=bert_first,pretrained={folder}")
  c.model.encoder.sep_id = 102
  with pytest.raises(ValueError, match=r"encoder.sep_id=102, but the vocabulary of .*bert "
                                       r"puts it at 3"):  # Before any weight is copied.
    init_from.apply(c, params={}, abstract_state=None)
  c.unlock()
  c.model.encoder.pretrained_path, c.init_from.kind, c.init_from.path = "", "hf_bert", str(
      folder)
  with pytest.raises(ValueError, match=r"encoder.sep_id=102, but the vocabulary"):
    init_from.apply(c, params={}, abstract_state=None)  # The same through init_from.
  c = _local(corpus, f"encoder=bert_first,pretrained={folder}")
  c.model.encoder.vocab_size = 20
  with pytest.raises(ValueError, match=r"vocab_size=20, but the tokenizer .* has 31 ids"):
    prepare.prepare_config(c, str(tmp_path))


def test_full_size_defaults_are_the_documented_ones():
  """The non-tiny defaults: a trained 8k SentencePiece vocabulary, num_classes from the
  data, a 10% dev split, early stopping; the BERT family finds the bundled MiniLM."""
  c = load_config("text_classification.py", "local,encoder=ran")
  assert (c.data.tokenizer.kind, c.data.tokenizer.path) == ("sentencepiece", "")
  assert c.data.tokenizer_vocab_size == 8000 and c.task.num_classes == 0
  assert c.data.eval_fraction == 0.1 and c.train.patience > 0 and c.data.long_threshold == 0
  assert c.train.num_epochs == 3
  assert load_config("text_classification.py", "local,encoder=transformer").train.num_epochs == 2
  assert load_config("text_classification.py", "local,encoder=slstm").model.encoder.num_steps == 2
  assert c.model.encoder.window_size == 128 and c.model.encoder.pooling == "max"
  from longtext_jax.encoders import bert_checkpoint  # pylint: disable=import-outside-toplevel
  path = bert_checkpoint.find_minilm()
  c = load_config("text_classification.py", "local,encoder=chunk_bert")
  assert c.model.encoder.pretrained_path == (path or "")
  if path:
    assert (c.data.tokenizer.kind, c.data.tokenizer.path) == ("wordpiece", path)
    assert c.model.encoder.hidden_size == 384


def _bert_positions(c) -> int:
  """BERT positions per training document of a BERT-family config at its longest (a
  document of ``data.max_tokens`` pieces, padded to the data's ``pad_multiple``)."""
  enc, d = c.model.encoder, c.data
  padded = pipeline.padded_length(d.max_tokens, d.pad_multiple, d.pad_offset)
  if enc.name == "chunk_bert":
    module = ChunkBert(chunk_size=enc.chunk_size, layout=enc.layout,
                       max_train_length=enc.max_train_length)
    cap = module.train_cap()
    assert cap >= d.max_tokens, "the training cap cuts what the data reads"
    ids = np.zeros((1, min(padded, cap)), np.int32)
    return int(np.prod(module.chunk(ids, ids > 0)[0].shape[1:]))
  if enc.name == "bert_first":
    return min(padded + 2, enc.max_length)
  if enc.name == "bert_random":
    return 2 * enc.max_length
  module = ToBert(segment_length=enc.segment_length, overlap=enc.overlap)
  return module.num_segments(padded) * enc.segment_length


@pytest.mark.parametrize("name", text_classification.BERT_FAMILY)
def test_bert_family_default_is_cpu_sized_and_long_is_the_papers_reading(name):
  """The default reads about 256 BERT positions per document for one or two epochs (a
  news_outlets run inside 15 CPU-minutes), with no chunk or segment that only padding fills;
  ``long`` restores the papers' reading (2048 pieces, 4 epochs at 5e-5); neither flag nor
  ``pretrained=`` is accepted by a from-scratch encoder."""
  c = load_config("text_classification.py", f"local,encoder={name}")
  assert _bert_positions(c) <= 288 and 1 <= c.train.num_epochs <= 2
  fields, tokens, epochs, rate = text_classification.BERT_CPU[name]
  assert (c.train.num_epochs, c.optim.learning_rate) == (epochs, rate)
  assert c.data.max_tokens == (254 if name == "chunk_bert" else tokens)
  assert all(c.model.encoder[k] == v for k, v in fields.items())
  long = load_config("text_classification.py", f"local,encoder={name},long")
  assert (long.train.num_epochs, long.optim.learning_rate) == (4.0, 5e-5)
  assert long.data.max_tokens == (2046 if name == "chunk_bert" else 2048)
  assert all(long.model.encoder[k] == v for k, v in text_classification.BERT_LONG[name].items())
  assert _bert_positions(long) >= 512
  # Everything else is the same config.
  for key in ("task", "init_from"):
    assert c[key].to_dict() == long[key].to_dict()
  assert c.model.encoder.pretrained_path == long.model.encoder.pretrained_path


@pytest.mark.parametrize("arg,chunks", [("local,encoder=chunk_bert", 2),
                                        ("local,encoder=chunk_bert,long", 16)])
def test_chunk_bert_reads_whole_chunks_in_training_and_evaluation(arg, chunks):
  """A batch of the longest documents the data hold is ``chunks`` chunks both while training
  (the cap) and at evaluation (no cap): the padded length leaves room for [CLS]/[SEP]
  (``data.pad_offset``), so no chunk is only padding."""
  c = load_config("text_classification.py", arg)
  enc, d = c.model.encoder, c.data
  assert _bert_positions(c) == chunks * enc.chunk_size
  padded = pipeline.padded_length(d.max_tokens, d.pad_multiple, d.pad_offset)
  module = ChunkBert(chunk_size=enc.chunk_size, layout=enc.layout)
  ids = np.ones((1, padded), np.int32)
  assert module.chunk(ids, ids > 0)[0].shape[1] == chunks
  no_offset = -(-d.max_tokens // d.pad_multiple) * d.pad_multiple  # The earlier padding.
  ids = np.ones((1, no_offset), np.int32)
  assert module.chunk(ids, ids > 0)[0].shape[1] == chunks + 1


@pytest.mark.parametrize("arg", ["local,encoder=ran,long", "imdb,long"])
def test_long_is_only_for_the_bert_family_on_local_files(arg):
  with pytest.raises(ValueError, match="long"):
    load_config("text_classification.py", arg)


# 5-13 s of CPU each (compiling the init, train and eval steps), about 100 s for all. Fast:
# the BERT family's ChunkBERT (and its inference checks) and ToBERT (segment pooling), and
# the from-scratch encoders with a recurrence (RAN, Star-Transformer, S-LSTM); the rest
# (the default Transformer, the LSTMs, windowed attention, BERT first/random: no path of
# their own here) are long. Every encoder's config builds and runs abstractly in
# test_every_encoder_config_prepares_and_validates.
FAST_END_TO_END = ("chunk_bert", "tobert", "ran", "star_transformer", "slstm")


@pytest.mark.parametrize("name", [n if n in FAST_END_TO_END else
                                  pytest.param(n, marks=pytest.mark.long)
                                  for n in sorted(encoders.ENCODERS)])
def test_every_encoder_trains_end_to_end(corpus, tmp_path, name):
  """local,encoder=<name>,tiny trains, picks the best dev checkpoint and evaluates the test
  file with it, reported apart (metrics.jsonl 'test', test_metrics.json)."""
  c = _local(corpus, f"encoder={name}")
  c.data.test_path = corpus["test"]
  out = train.train_and_evaluate(c, str(tmp_path))
  assert {"accuracy", "macro_f1", "test/accuracy", "test/macro_f1"} <= set(out)
  assert all(np.isfinite(v) for v in out.values())
  rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
  test_rows = [r for r in rows if r["split"] == "test"]
  assert len(test_rows) == 1 and test_rows[0]["accuracy"] == out["test/accuracy"]
  saved = json.load(open(tmp_path / "test_metrics.json"))
  assert saved["checkpoint"] == "best" and saved["test"]["macro_f1"] == out["test/macro_f1"]
  info = data_lib.load_data_info(str(tmp_path))
  assert info["label_names"] == list(own_corpus_data.CLASSES)
  assert info["tokenizer"]["path"] == os.path.join(str(tmp_path), "tokenizer",
                                                   "sentencepiece-300.model")
  saved = json.load(open(tmp_path / "config.json"))  # The prepared config, for inference.
  assert saved["data"]["tokenizer"]["path"] == info["tokenizer"]["path"]
  assert saved["task"]["num_classes"] == 5
  assert info["splits"]["test"]["examples"] == 20
  assert info["splits"]["eval"]["origin"]["fraction"] == 0.1  # Split off train.jsonl.
  if name == "chunk_bert":  # Inference's length buckets (pad_offset 2) vs the loop's batches.
    predictor = inference.load(str(tmp_path))
    tested = json.load(open(tmp_path / "test_metrics.json"))
    assert predictor.pad_offset == 2 and predictor.step == tested["step"]
    result = predictor.evaluate(corpus["test"])
    np.testing.assert_allclose(result["metrics"]["accuracy"], out["test/accuracy"], atol=1e-6)
    np.testing.assert_allclose(result["metrics"]["loss"], out["test/loss"], rtol=1e-5)
    # A run saved before data.pad_offset existed (multiples of 64 here): the Predictor still
    # buckets whole chunks of the encoder (32 - 2 pieces...), with the same results.
    old = json.load(open(tmp_path / "config.json"))
    del old["data"]["pad_offset"]
    old["data"]["pad_multiple"] = 64
    json.dump(old, open(tmp_path / "config.json", "w"))
    predictor = inference.load(str(tmp_path))
    assert (predictor.pad_multiple, predictor.pad_offset) == (32, 2)
    again = predictor.evaluate(corpus["test"])["metrics"]
    np.testing.assert_allclose(again["loss"], result["metrics"]["loss"], rtol=1e-5)


def test_tokenizer_is_trained_once_and_reused_on_resume_and_by_inference(corpus, tmp_path):
  """The SentencePiece model is trained into the workdir once: preparing the same config
  again (what a resumed run does first) reuses the file untouched, and loading it as
  data_info.json records it (what inference does) gives the same ids. Another vocabulary
  size is another file."""
  c = _local(corpus)
  first = prepare.prepare_config(c, str(tmp_path))
  path = first.data.tokenizer.path
  assert path == prepare.trained_tokenizer_path(str(tmp_path), "sentencepiece", 300)
  assert c.data.tokenizer.path == ""  # The caller's config is left as it was.
  mtime = os.stat(path).st_mtime_ns
  again = prepare.prepare_config(c, str(tmp_path))
  assert again.data.tokenizer.path == path and os.stat(path).st_mtime_ns == mtime
  info = data_lib.data_info(None, again.data.tokenizer)["tokenizer"]
  loaded = tokenizers.build_tokenizer(ml_collections.ConfigDict(info))
  text = "Kalomi vano sipe, and more."
  trained = tokenizers.build_tokenizer(first.data.tokenizer)
  np.testing.assert_array_equal(loaded.encode(text), trained.encode(text))
  assert loaded.vocab_size == first.model.vocab_size
  c.data.tokenizer_vocab_size = 200
  other = prepare.prepare_config(c, str(tmp_path))
  assert other.data.tokenizer.path.endswith("sentencepiece-200.model")
  assert other.model.vocab_size <= 200


def test_a_moved_run_reads_the_tokenizer_in_its_own_folder(corpus, tmp_path):
  """data_info.json records a trained tokenizer by its absolute path inside the workdir: a
  run copied or moved elsewhere failed to load although its tokenizer/ came along (new-user
  review, s35). It now reads its own copy; a tokenizer_path given and missing still fails."""
  first = prepare.prepare_config(_local(corpus), str(tmp_path / "run"))
  info = data_lib.data_info(None, first.data.tokenizer)
  shutil.move(str(tmp_path / "run"), str(tmp_path / "moved"))
  moved = str(tmp_path / "moved")
  tok, spec = inference._tokenizer(first, info, moved, None)  # pylint: disable=protected-access
  assert spec["path"] == os.path.join(moved, "tokenizer",
                                      os.path.basename(first.data.tokenizer.path))
  assert tok.vocab_size == first.model.vocab_size
  with pytest.raises(FileNotFoundError, match="was not found"):
    inference._tokenizer(first, info, moved, str(tmp_path / "nope.model"))  # pylint: disable=protected-access
  # A copy beside a still-present original reads its own tokenizer, not the original's.
  shutil.copytree(moved, str(tmp_path / "copy"))
  info_moved = data_lib.data_info(None, ml_collections.ConfigDict(
      dict(first.data.tokenizer.to_dict(), path=spec["path"])))
  _, spec2 = inference._tokenizer(first, info_moved, str(tmp_path / "copy"), None)  # pylint: disable=protected-access
  assert spec2["path"] == os.path.join(str(tmp_path / "copy"), "tokenizer",
                                       os.path.basename(spec["path"]))


def test_word_tokenizer_is_trained_from_the_texts(corpus, tmp_path):
  """kind='word' without a path: the most frequent training words, lowercased,
  punctuation split off; unknown words map to <unk>; cached like SentencePiece."""
  c = prepare.prepare_config(_local(corpus, data__tokenizer__kind="word",
                                    data__tokenizer_vocab_size=40), str(tmp_path))
  tok = tokenizers.build_tokenizer(c.data.tokenizer)
  assert isinstance(tok, tokenizers.WordTokenizer) and tok.vocab_size == 40
  assert c.data.tokenizer.path.endswith("word-40.txt") and c.model.vocab_size == 40
  records = local_files.read_splits(local_files.LocalOptions.from_config(c.data), "label")[0]
  texts = [r["text"] for r in records["train"]]  # The dev split is not trained on.
  counts = collections.Counter(w for t in texts for w in tokenizers.WordTokenizer.split(t))
  assert tok.words == [w for w, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))][:35]
  small = tokenizers.WordTokenizer([tok.words[0], ",", "."])
  ids = small.encode(f"{tok.words[0].upper()}, zzzunseen.")
  np.testing.assert_array_equal(ids, [5, 6, small.unk_id, 7])
  assert small.decode(ids) == f"{tok.words[0]} , <unk> ."


def test_eval_fraction_split_is_stratified_seeded_and_recorded(corpus):
  """data.eval_fraction: per label round(n * fraction) documents go to the dev split; the
  same seed gives the same split, another seed another; train and dev partition the file;
  the dev documents are listed in data_info.json."""
  records, _, _, _ = local_files.read_splits(
      local_files.LocalOptions(corpus["train"], "", eval_fraction=0.25), "label")
  lines = open(corpus["train"]).read().splitlines()
  dev = records["eval"]
  assert collections.Counter(r["label"] for r in dev) == {c: 4 for c in own_corpus_data.CLASSES}
  assert len(records["train"]) + len(dev) == len(lines)
  assert not {r["where"] for r in dev} & {r["where"] for r in records["train"]}
  again = local_files.read_splits(
      local_files.LocalOptions(corpus["train"], "", eval_fraction=0.25), "label")[0]["eval"]
  other = local_files.read_splits(local_files.LocalOptions(
      corpus["train"], "", eval_fraction=0.25, split_seed=1), "label")[0]["eval"]
  assert [r["where"] for r in again] == [r["where"] for r in dev]
  assert [r["where"] for r in other] != [r["where"] for r in dev]
  c = _local(corpus, data__eval_fraction=0.25, data__tokenizer__kind="byte",
             model__vocab_size=tokenizers.ByteTokenizer().vocab_size, task__num_classes=5)
  splits = data_lib.build_splits(c, tasks_lib.get_task(c.task))
  origin = data_lib.data_info(splits)["splits"]["eval"]["origin"]
  assert origin["where"] == [r["where"] for r in dev] and origin["stratified_by"] == "label"
  assert len(splits["train"]) == 60 and len(splits["eval"]) == 20


def test_reading_only_the_training_split_gives_the_same_records_and_no_other_file(
    corpus, tmp_path):
  """read_splits(only=['train']) (what prepare_config reads): the training records of a
  full read, with the dev split cut off or read from its file; the other files are not
  read (empty ones, an error when read, raise nothing; that they exist is checked), and an
  unknown split name is an error."""
  missing = tmp_path / "empty.jsonl"
  missing.write_text("")
  missing = str(missing)
  for eval_path, fraction in ((corpus["test"], 0.0), ("", 0.25)):
    options = local_files.LocalOptions(corpus["train"], eval_path, eval_fraction=fraction,
                                       test_path=corpus["test"])
    full = local_files.read_splits(options, "label")[0]
    alone = local_files.read_splits(dataclasses.replace(
        options, test_path=missing, eval_path=eval_path and missing), "label", only=["train"])
    assert list(alone[0]) == ["train"] and list(alone[2]) == ["train"] and not alone[3]
    assert [r["where"] for r in alone[0]["train"]] == [r["where"] for r in full["train"]]
    assert len(full["train"]) < 80 if fraction else len(full["train"]) == 80
  with pytest.raises(ValueError, match="unknown split"):
    local_files.read_splits(options, "label", only=["dev"])


def test_split_off_keeps_rare_classes_in_training():
  """A class with one document stays in training; with two, one goes to dev."""
  recs = [{"where": f"f:{i}", "label": lab} for i, lab in enumerate("aaaaaaaaaabbc")]
  train_recs, dev, info = local_files.split_off(recs, 0.1, 0, "label")
  assert collections.Counter(r["label"] for r in dev) == {"a": 1, "b": 1}
  assert [r["label"] for r in train_recs].count("c") == 1 and info["examples"] == 2


@pytest.mark.parametrize("curve,stop,best", [
    ([1.0, 0.5, 0.25], 3, 1),  # Falls after step 1.
    ([0.5, 0.5, 0.5], 3, 3),  # Level: ties, the newest is tested.
    ([0.2, 0.5, 0.5, 0.5, 0.5], 4, 4),  # Rises once, then level: patience from step 2.
])
def test_patience_stops_training_and_the_test_split_uses_the_best_checkpoint(tmp_path, curve,
                                                                            stop, best):
  """train.patience=2 with an evaluation every step: two evaluations after the best value was
  first reached (a tie is no progress for early stopping) stop the loop there (checkpoint
  saved), not at num_steps; a resumed loop sees the exhausted patience (from the best
  checkpoint) and trains no further; the test split is then evaluated with the best
  parameters: of the tied steps, the newest (trained longest). The loop runs with
  a stand-in step (no model compiled): it adds 1 to the parameter, so the parameter is the
  step it was saved at."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import types  # pylint: disable=import-outside-toplevel
  from longtext_jax.train import checkpointing, loop  # pylint: disable=import-outside-toplevel
  from longtext_jax.train import logging as log_lib  # pylint: disable=import-outside-toplevel
  from longtext_jax.train import sharding as shard_lib  # pylint: disable=import-outside-toplevel
  config = config_lib.base_config()
  config.train.update(num_steps=50, eval_every=1, checkpoint_every=50, patience=2,
                      best_metric="accuracy", progress_bar=False, async_checkpoint=False)
  run = types.SimpleNamespace(config=config, workdir=str(tmp_path), is_main=True,
                              mesh=shard_lib.make_mesh(config.mesh), preemption=None)
  evals = []

  def run_eval(params):
    del params
    evals.append(1)
    return {"accuracy": curve[len(evals) - 1]}

  def train_step(state, batch, rng):
    del batch, rng
    new = loop.TrainState(step=state.step + 1, params={"w": state.params["w"] + 1},
                          opt_state=())
    return new, {"loss": jnp.zeros(()), "grad_norm": jnp.zeros(()), "ok": jnp.array(True)}

  class Batches:
    def __next__(self):
      return {}
    def get_state(self):
      return {"position": 0}

  def loop_once():
    ckpt = checkpointing.Checkpointer(str(tmp_path), 3, False, "accuracy", "max")
    writer = log_lib.MetricWriter(str(tmp_path), enabled=True)
    latest = ckpt.latest_step() or 0
    state = loop.TrainState(step=jnp.asarray(latest, jnp.int32),
                            params={"w": jnp.zeros(2)}, opt_state=())
    try:
      return loop.train_loop(run, state, train_step, Batches(), run_eval, ckpt, writer,
                             None)
    finally:
      ckpt.close()
      writer.close()

  result = loop_once()
  assert result.step == stop and len(evals) == stop
  assert sorted(os.listdir(tmp_path / "checkpoints")) == [str(stop)]
  assert os.listdir(tmp_path / "best") == [str(best)]
  result = loop_once()  # Resumed where it stopped: patience is still exhausted.
  assert result.step == stop and len(evals) == stop
  # The test split, evaluated once with the best checkpoint (w = its step).
  import jax  # pylint: disable=import-outside-toplevel
  cpu = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  spec = types.SimpleNamespace(abstract=loop.TrainState(
      step=jax.ShapeDtypeStruct((), jnp.int32, sharding=cpu),
      params={"w": jax.ShapeDtypeStruct((2,), jnp.float32, sharding=cpu)}, opt_state=()))
  run.task = types.SimpleNamespace(summarize=lambda sums: {"w": float(sums["w"])})
  run.pad_multiple, run.pad_offset = 1, 0
  test = data_lib.ArraySource({"input_ids": np.ones((3, 4), np.int32),
                               "mask": np.ones((3, 4), bool)})
  calls = []

  def test_once(test_path):
    run.config.data.test_path = test_path
    ckpt = checkpointing.Checkpointer(str(tmp_path), 3, False, "accuracy", "max")
    writer = log_lib.MetricWriter(str(tmp_path), enabled=True)
    def eval_step(params, batch):
      calls.append(1)
      return {"w": params["w"][0]}
    try:
      return loop.evaluate_test_split(run, spec, ckpt, eval_step, {"test": test}, result,
                                      writer)
    finally:
      ckpt.close()
      writer.close()

  def test_rows():
    return [r for r in map(json.loads, open(tmp_path / "metrics.jsonl"))
            if r["split"] == "test"]

  assert test_once("test.jsonl") == {"test/w": float(best)} and calls
  saved = json.load(open(tmp_path / "test_metrics.json"))
  assert saved == {"step": best, "checkpoint": "best", "test_path": "test.jsonl",
                   "test": {"w": float(best)}}
  # A relaunch of the finished run: the same checkpoint and test file are not evaluated
  # again and add no record; another test file is.
  calls.clear()
  assert test_once("test.jsonl") == {"test/w": float(best)} and not calls
  assert len(test_rows()) == 1
  assert test_once("other.jsonl") == {"test/w": float(best)} and calls
  assert len(test_rows()) == 2
  assert loop.evaluate_test_split(run, spec, None, None, {}, result, None) == {}


def test_patience_needs_a_best_metric():
  """Early stopping without the dev metric it watches is a config error naming both."""
  c = config_lib.base_config()
  c.train.patience = 2
  with pytest.raises(ValueError, match="patience=2 needs config.train.best_metric"):
    config_lib.validate(c)
  c.train.patience = -1
  with pytest.raises(ValueError, match="patience=-1 must be >= 0"):
    config_lib.validate(c)


def test_num_epochs_sets_the_steps_from_the_training_size(corpus, tmp_path, caplog):
  """train.num_epochs=2 with 70 training documents (80 minus the dev split's 2 per class)
  and batch 8 is ceil(17.5) = 18 steps, evaluated every epoch (9 steps), the warmup cut
  to a tenth; the log says how many epochs of data that is (batches run across epochs)."""
  with caplog.at_level("WARNING"):
    c = prepare.prepare_config(_local(corpus, train__num_epochs=2.0, optim__warmup_steps=100),
                               str(tmp_path))
  assert c.train.num_steps == 18 and c.train.eval_every == c.train.checkpoint_every == 9
  assert ("train.num_steps=18 (2.06 epochs of 70 examples, batch 8; evaluated every 9 "
          "steps, 1.03 epochs; from train.num_epochs=2, the config's num_steps=") in caplog.text
  assert "counts only with train.num_epochs=0)" in caplog.text
  assert c.optim.warmup_steps == 1
  # train.min_steps floors the count (more epochs of a small set), still evaluated per epoch;
  # a floor below the epochs' count changes nothing.
  floored = prepare.prepare_config(
      _local(corpus, train__num_epochs=2.0, train__min_steps=40), str(tmp_path))
  assert floored.train.num_steps == 40 and floored.train.eval_every == 9
  assert prepare.prepare_config(_local(corpus, train__num_epochs=2.0, train__min_steps=10),
                                str(tmp_path)).train.num_steps == 18
  with pytest.raises(ValueError, match="num_epochs=2.0 needs data.name='local'"):
    bad = load_config("needle.py", "transformer,tiny")
    bad.train.num_epochs = 2.0
    prepare.prepare_config(bad, str(tmp_path))


def test_other_task_kinds_read_local_files(tmp_path):
  """task=multilabel (a list of labels per document; num_classes from the label set),
  task=regression (a number per document) and task=pairs build their splits from JSONL."""
  docs = own_corpus_data.documents(4, multilabel=True)
  path = own_corpus_data.write_jsonl(str(tmp_path / "ml.jsonl"), docs)
  c = prepare.prepare_config(_local({"train": path}, "task=multilabel"), str(tmp_path))
  assert c.task.num_classes == 5 and c.train.best_metric == "micro_f1"
  splits = data_lib.build_splits(c, tasks_lib.get_task(c.task))
  hot = np.stack([splits["train"][i]["labels"] for i in range(len(splits["train"]))])
  assert hot.shape[1] == 5 and (hot.sum(1) >= 1).all() and (hot.sum(1) == 2).any()
  rows = [{"text": d["text"], "label": float(len(d["text"].split()))} for d in docs]
  path = own_corpus_data.write_jsonl(str(tmp_path / "reg.jsonl"), rows)
  c = prepare.prepare_config(_local({"train": path}, "task=regression"), str(tmp_path))
  splits = data_lib.build_splits(c, tasks_lib.get_task(c.task))
  targets = sorted(float(splits["eval"][i]["target"][0]) for i in range(len(splits["eval"])))
  assert targets and set(targets) <= {r["label"] for r in rows}
  assert c.train.best_mode == "min"
  rows = [{"text": d["text"], "text_pair": d["text"][::-1], "label": d["label"][0]}
          for d in docs]
  path = own_corpus_data.write_jsonl(str(tmp_path / "pairs.jsonl"), rows)
  c = prepare.prepare_config(_local({"train": path}, "task=pairs"), str(tmp_path))
  splits = data_lib.build_splits(c, tasks_lib.get_task(c.task))
  assert set(splits["train"][0]["token_type_ids"].tolist()) == {0, 1}


def test_macro_f1_is_the_mean_f1_of_the_classes_that_occur():
  """Classification's macro_f1 from the confusion counts: the mean over classes seen as gold
  or predicted of 2tp / (2tp + fp + fn) (scikit-learn's average='macro'); a class absent
  from both is left out. Binary's macro_f1 averages class 1's and class 0's F1."""
  confusion = np.zeros((4, 4))
  confusion[:3, :3] = [[2, 1, 0], [0, 3, 0], [1, 0, 0]]  # Class 3 never occurs.
  task = tasks_lib.get_task(ml_collections.ConfigDict(
      dict(name="classification", num_classes=4, head_hidden_dim=0, head_dropout=0.0)))
  sums = {"loss_sum": 0.0, "loss_weight": 7.0, "correct": 5.0, "count": 7.0,
          "confusion": confusion}
  want = (2 * 2 / (4 + 1 + 1) + 2 * 3 / (6 + 1) + 0.0) / 3
  assert task.summarize(sums)["macro_f1"] == pytest.approx(want) == pytest.approx(32 / 63)
  binary = tasks_lib.get_task(ml_collections.ConfigDict(
      dict(name="binary", num_classes=2, head_hidden_dim=0, head_dropout=0.0)))
  # 3 true positives, 1 false positive, 2 false negatives, 4 true negatives.
  sums = {"loss_sum": 0.0, "loss_weight": 10.0, "correct": 7.0, "count": 10.0,
          "tp": [3.0], "fp": [1.0], "fn": [2.0]}
  assert binary.summarize(sums)["macro_f1"] == pytest.approx((6 / 9 + 8 / 11) / 2)


def _swap_labels(path):
  """Rewrites a JSONL file in place with every label moved to the next class's name."""
  rows = [json.loads(line) for line in open(path, encoding="utf-8")]
  names = sorted({r["label"] for r in rows})
  with open(path, "w", encoding="utf-8") as f:
    for r in rows:
      r["label"] = names[(names.index(r["label"]) + 1) % len(names)]
      f.write(json.dumps(r) + "\n")


def test_a_training_file_edited_in_place_is_refused_on_resume(corpus, tmp_path):
  """A run killed, its training file edited in place (labels swapped), the same command run
  again: it resumed on the other data and reported a model trained on both (review s36 M1).
  Now refused naming the file and both digests; allow_config_change=data.train_path
  continues on the new contents (and records them)."""
  train_file = tmp_path / "train.jsonl"
  shutil.copy(corpus["train"], train_file)
  workdir = str(tmp_path / "run")

  def config(steps, allow="train.num_steps"):
    c = _local(corpus, "encoder=bilstm", train__num_epochs=0.0, train__num_steps=steps,
               train__eval_every=2, train__checkpoint_every=2,
               train__allow_config_change=allow, data__train_path=str(train_file),
               data__eval_fraction=0.25)
    return c

  train.train_and_evaluate(config(2), workdir)
  recorded = data_lib.load_data_info(workdir)["data_files"]
  assert set(recorded) == {"data.train_path"}
  _swap_labels(train_file)
  with pytest.raises(ValueError, match=r"trained on other data: config.data.train_path "
                     r".*train.jsonl \(SHA-256 \w{12}\) is not the .*allow_config_change="
                     r"data.train_path"):
    train.train_and_evaluate(config(4), workdir)
  assert not os.path.exists(os.path.join(workdir, "checkpoints", "4"))
  train.train_and_evaluate(config(4, "train.num_steps,data.train_path"), workdir)
  assert os.path.exists(os.path.join(workdir, "checkpoints", "4"))
  now = data_lib.load_data_info(workdir)["data_files"]["data.train_path"]["sha256"]
  assert now != recorded["data.train_path"]["sha256"]


def test_a_tokenizer_left_by_a_launch_without_checkpoints_is_retrained_for_other_data(
    corpus, tmp_path, caplog):
  """A launch killed before its first checkpoint left its trained tokenizer; the next
  launch in that workdir on another corpus reused it with nothing said (review s36 M1). It
  is now trained again on the new texts (a warning says why); once the workdir has
  checkpoints the model's embeddings depend on it and it is kept."""
  other = tmp_path / "other.jsonl"
  with open(corpus["train"], encoding="utf-8") as f, open(other, "w", encoding="utf-8") as g:
    for line in f:
      r = json.loads(line)
      g.write(json.dumps(dict(r, text=r["text"].upper()[::-1])) + "\n")
  workdir = str(tmp_path / "run")
  path = prepare.prepare_config(_local(corpus), workdir).data.tokenizer.path
  first = open(path, "rb").read()
  caplog.set_level("WARNING")
  again = prepare.prepare_config(_local(corpus, data__train_path=str(other)), workdir)
  assert again.data.tokenizer.path == path and "training it again" in caplog.text
  retrained = open(path, "rb").read()
  assert retrained != first
  os.makedirs(os.path.join(workdir, "checkpoints", "2"))
  caplog.clear()
  prepare.prepare_config(_local(corpus), workdir)
  assert open(path, "rb").read() == retrained and "training it again" not in caplog.text
