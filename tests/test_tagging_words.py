"""Tagging over words, not sub-tokens: what the loss, token accuracy and span F1 count.

A text loader splits a word into several tokens (bytes, SentencePiece pieces) and marks its
first token (``tag_mask``): that position is the word's one label. These tests build
batches with the real loader (:class:`TextEncoder`, byte tokenizer: a word of ``k`` letters
is ``k`` or ``k + 1`` tokens), put arbitrary predictions on the later tokens of each word,
and check the task's numbers against a word-level reference: ``metrics_conll.span_f1``
over whole sentences (itself checked against seqeval in test_metric_oracles.py), with a
document cut at ``max_tokens`` scored as conlleval scores the whole one, its unread tail
predicted ``O``.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longtext_jax import config as config_lib
from longtext_jax import inference, metrics_conll, tasks
from longtext_jax.data import pipeline, tokenizers
from longtext_jax.data import text as text_lib
from longtext_jax.layers import crf as crf_lib

TYPES = ("PER", "LOC")
IOB2 = ("O",) + tuple(f"{k}-{t}" for t in TYPES for k in "BI")
IOBES = ("O",) + tuple(f"{k}-{t}" for t in TYPES for k in "BIES")


def _task(name, names, **fields):
  config = config_lib.base_config().task  # Every task field at its default.
  config.update(name=name, num_classes=len(names), tag_names=names, **fields)
  return tasks.get_task(config)


def _segments_tags(rng, n, scheme):
  """Well-formed word tags of a random segmentation of ``n`` words."""
  tags = []
  while len(tags) < n:
    size = int(rng.integers(1, min(n - len(tags), 3) + 1))
    if rng.random() < 0.4:
      tags += ["O"] * size
      continue
    t = TYPES[rng.integers(len(TYPES))]
    if scheme == IOBES:
      tags += [f"S-{t}"] if size == 1 else [f"B-{t}"] + [f"I-{t}"] * (size - 2) + [f"E-{t}"]
    else:
      tags += [f"B-{t}"] + [f"I-{t}"] * (size - 1)
  return tags


def _case(rng, names, batch=6, max_tokens=0):
  """Sentences (word tags: gold, predicted), their encoded batch and per-token logits that
  give the predicted tag at each word's first token and a random tag elsewhere."""
  task = _task("span_tagging", names)
  encoder = text_lib.TextEncoder(tokenizers.ByteTokenizer(), "tags", len(names),
                                 text_lib.LabelVocab(names), max_tokens, False,
                                 task.cut_fields)
  sents, examples, logits = [], [], []
  for _ in range(batch):
    n = int(rng.integers(1, 9))
    words = ["".join("abcdefgh"[i] for i in rng.integers(0, 8, int(rng.integers(1, 5))))
             for _ in range(n)]
    gold = _segments_tags(rng, n, names)
    pred = [g if rng.random() < 0.7 else names[rng.integers(len(names))] for g in gold]
    ex = encoder({"words": words, "tags": gold, "where": "x"})
    pred_L = rng.integers(0, len(names), len(ex["input_ids"]))
    pred_L[ex["tag_mask"]] = [names.index(t) for t in pred[:int(ex["tag_mask"].sum())]]
    sents.append((gold, pred, int(ex["tag_mask"].sum())))
    examples.append(ex)
    logits.append(pred_L)
  b = pipeline.collate(examples, length=40)  # 8 words of <= 5 bytes: one compilation.
  logits_BL = np.stack([np.pad(x, (0, b["mask"].shape[1] - len(x))) for x in logits])
  return sents, b, logits_BL


def _reference(sents):
  """Word-level conlleval counts: the whole gold; predictions past a cut read ``O``."""
  gold = [g for g, _, _ in sents]
  pred = [p[:kept] + ["O"] * (len(p) - kept) for _, p, kept in sents]
  correct = sum(sum(a == b for a, b in zip(p[:k], g[:k])) for g, p, k in sents)
  return metrics_conll.span_f1(gold, pred), correct / sum(k for _, _, k in sents)


@pytest.mark.parametrize("names", [IOB2, IOBES], ids=["iob2", "iobes"])
@pytest.mark.parametrize("kind", ["span_tagging", "crf_tagging"])
@pytest.mark.parametrize("max_tokens", [0, 12])
def test_span_f1_and_accuracy_count_words_as_conlleval(names, kind, max_tokens):
  """Random sentences, random sub-token predictions: the task's span counts and token
  accuracy equal the word-level reference (cut documents' lost gold spans are misses)."""
  rng = np.random.default_rng(len(names) + max_tokens + len(kind))
  # Free decoding: the predictions are random, ill-formed tags included (conlleval's rules
  # on them are what is compared; constrained decoding is tested in test_crf.py).
  task = _task(kind, names, constrained_decoding=False)
  metrics = jax.jit(task.metrics)
  cut = 0
  for _ in range(8):
    sents, b, pred_BL = _case(rng, names, max_tokens=max_tokens)
    scores_BLC = 20.0 * jax.nn.one_hot(pred_BL, len(names))  # Viterbi = argmax (no
    if kind == "crf_tagging":                                  # transitions learned).
      c = len(names)
      outputs = {"crf": {"emissions": scores_BLC, "transitions": jnp.zeros((c, c)),
                         "start": jnp.zeros(c), "end": jnp.zeros(c)}}
    else:
      outputs = {"logits": scores_BLC}
    batch = {k: jnp.asarray(v) for k, v in b.items()}
    out = task.summarize(jax.device_get(metrics(outputs, batch)))
    ref, accuracy = _reference(sents)
    assert out["span_f1"] == pytest.approx(ref["f1"], abs=1e-6)
    assert out["span_precision"] == pytest.approx(ref["precision"], abs=1e-6)
    assert out["span_recall"] == pytest.approx(ref["recall"], abs=1e-6)
    assert out["token_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    cut += sum(kept < len(g) for g, _, kept in sents)
  assert (cut > 0) == bool(max_tokens)  # The cut case is exercised.


def test_a_cut_counts_the_spans_past_it_and_the_one_across_it():
  """One sentence, cut inside its second entity: 3 gold spans, 1 predictable; a prediction
  of the kept part of the cut entity is not a match (the gold one is longer)."""
  names = IOB2
  task = _task("span_tagging", names)
  encoder = text_lib.TextEncoder(tokenizers.ByteTokenizer(), "tags", len(names),
                                 text_lib.LabelVocab(names), 9, False, task.cut_fields)
  words = ["Ann", "met", "Bo", "Li", "in", "Rome"]  # 3 + 4 + 3 + 3 + 3 + 5 bytes.
  gold = ["B-PER", "O", "B-PER", "I-PER", "O", "B-LOC"]
  ex = encoder({"words": words, "tags": gold, "where": "x"})
  assert int(ex["tag_mask"].sum()) == 3  # Ann, met, Bo (cut after 9 bytes).
  assert int(ex["gold_spans_cut"]) == 1 and bool(ex["gold_span_open"])
  b = {k: jnp.asarray(v) for k, v in pipeline.collate([ex]).items()}
  logits = 10.0 * jax.nn.one_hot(jnp.where(b["tag_mask"], b["tags"], 0), len(names))
  sums = jax.device_get(jax.jit(task.metrics)({"logits": logits}, b))
  assert (sums["span_correct"], sums["span_pred"], sums["span_gold"]) == (1, 2, 3)


def test_later_tokens_of_a_word_change_no_loss():
  """The loss reads each word's first token only: the same for any scores on the others
  (softmax and CRF), and the CRF's equals its loss over the words alone (one token each)."""
  rng = np.random.default_rng(0)
  names = IOB2
  c = len(names)
  _, b, _ = _case(rng, names, batch=5)
  batch = {k: jnp.asarray(v) for k, v in b.items()}
  later_BL = batch["mask"] & ~batch["tag_mask"]
  e1 = jnp.asarray(rng.normal(size=batch["mask"].shape + (c,)), jnp.float32)
  e2 = jnp.where(later_BL[..., None], 5.0 * rng.normal(size=e1.shape), e1)
  crf = lambda e: {"crf": {"emissions": e, "transitions": jnp.asarray(
      rng.normal(size=(c, c)), jnp.float32), "start": jnp.zeros(c), "end": jnp.ones(c)}}
  soft = _task("span_tagging", names)
  assert soft.loss({"logits": e1}, batch)[0] == pytest.approx(
      float(soft.loss({"logits": e2}, batch)[0]), rel=1e-6)
  crf_task = _task("crf_tagging", names)
  out1 = crf(e1)
  out2 = {"crf": dict(out1["crf"], emissions=e2)}
  crf_loss = jax.jit(crf_task.loss)
  loss1, words = crf_loss(out1, batch)
  assert float(loss1) == pytest.approx(float(crf_loss(out2, batch)[0]), rel=1e-6)
  assert int(words) == int(batch["tag_mask"].sum())
  # The words alone, one token each, without tag_mask.
  rows = [np.flatnonzero(np.asarray(m)) for m in batch["tag_mask"]]
  n = max(len(r) for r in rows)
  take = lambda x: jnp.stack([jnp.pad(x[i][r], [(0, n - len(r))] + [(0, 0)] * (x.ndim - 2))
                              for i, r in enumerate(rows)])
  words_batch = {"tags": take(batch["tags"]),
                 "mask": jnp.arange(n)[None] < jnp.asarray([len(r) for r in rows])[:, None]}
  ll = jax.jit(crf_lib.crf_log_likelihood)(take(e1), words_batch["tags"], words_batch["mask"],
                                  *crf_task._crf_args(out1["crf"]))
  assert float(loss1) == pytest.approx(-float(jnp.sum(ll)), rel=1e-5)


@pytest.mark.parametrize("kind", ["span_tagging", "crf_tagging"])
def test_decode_gives_each_token_its_words_tag(kind):
  rng = np.random.default_rng(1)
  names = IOBES
  task = _task(kind, names, constrained_decoding=False)  # Random (ill-formed) tags kept.
  _, b, pred_BL = _case(rng, names, batch=4)
  scores = 20.0 * jax.nn.one_hot(pred_BL, len(names))
  c = len(names)
  outputs = ({"logits": scores} if kind == "span_tagging" else
             {"crf": {"emissions": scores, "transitions": jnp.zeros((c, c)),
                      "start": jnp.zeros(c), "end": jnp.zeros(c)}})
  decoded = task.decode(outputs, list(names), b)
  for row, d in enumerate(decoded):
    starts = np.flatnonzero(b["tag_mask"][row])
    n = int(b["mask"][row].sum())
    assert len(d["tags"]) == n
    ends = list(starts[1:]) + [n]
    for s, e in zip(starts, ends):
      assert d["tags"][s:e] == [names[pred_BL[row, s]]] * (e - s)


def test_iobes_words_split_into_pieces_stay_one_chunk():
  """S-X / E-X words of several bytes: the gold span count is the words' (was one chunk per
  byte: S-PER copied onto each byte of the word)."""
  names = IOBES
  task = _task("span_tagging", names)
  encoder = text_lib.TextEncoder(tokenizers.ByteTokenizer(), "tags", len(names),
                                 text_lib.LabelVocab(names), 0, False, task.cut_fields)
  sents = [(["Obama", "spoke"], ["S-PER", "O"]),
           (["Angela", "Merkel", "spoke"], ["B-PER", "E-PER", "O"])]
  b = pipeline.collate([encoder({"words": w, "tags": t, "where": "x"}) for w, t in sents])
  batch = {k: jnp.asarray(v) for k, v in b.items()}
  logits = 10.0 * jax.nn.one_hot(batch["tags"], len(names))
  sums = jax.device_get(jax.jit(task.metrics)({"logits": logits}, batch))
  assert (sums["span_correct"], sums["span_pred"], sums["span_gold"]) == (2, 2, 2)


def _tagger(max_len=4096):
  c = config_lib.base_config()
  c.data.name = "local"
  c.data.add_special_tokens = False
  c.model.vocab_size = tokenizers.ByteTokenizer().vocab_size
  c.model.d_model = 16
  c.model.encoder = config_lib.encoder_config("transformer", num_layers=1, num_heads=2,
                                              position="learned", max_len=max_len)
  c.task.name, c.task.num_classes, c.task.tag_names = "span_tagging", 3, ("O", "B-X", "I-X")
  return c


def test_predict_cli_keeps_a_conll_files_words(tmp_path):
  """A CoNLL word holding a no-break space is one word from the file to the prediction: the
  command line passes the file's words (it used to re-split them at whitespace, shifting
  every later tag against the input lines)."""
  from longtext_jax import export  # pylint: disable=import-outside-toplevel
  from longtext_jax import predict as predict_cli  # pylint: disable=import-outside-toplevel
  p = inference.Predictor.from_config(_tagger(), label_names=["O", "B-X", "I-X"])
  folder = export.export(p, str(tmp_path / "export"))
  path = tmp_path / "in.conll"
  path.write_text("paid O\n10\u00a0000 B-X\neuros O\n\nok O\n", encoding="utf-8")
  out = tmp_path / "preds.jsonl"
  assert predict_cli.main(["predict", f"--workdir={folder}", f"--input={path}",
                           f"--output={out}"]) == 0
  rows = [json.loads(line) for line in open(out, encoding="utf-8")]
  assert [r["words"] for r in rows] == [["paid", "10\u00a0000", "euros"], ["ok"]]
  direct = p.predict([["paid", "10\u00a0000", "euros"], ["ok"]])
  assert [r["tags"] for r in rows] == [d["tags"] for d in direct]
  # A str is split at whitespace: the same words as a list give the same tags.
  assert p.predict(["paid more euros"])[0]["tags"] == p.predict(
      [["paid", "more", "euros"]])[0]["tags"]
  with pytest.raises(ValueError, match="list of str"):
    p.predict([["a", 3]])


def test_evaluate_a_file_scores_cut_documents_as_conlleval_scores_the_whole(tmp_path):
  """evaluate(path) == conlleval over the file's whole gold and predict()'s word tags (the
  words past a cut predicted O), and it says how many documents were cut."""
  c = _tagger()
  c.data.max_tokens = 8
  names = ["O", "B-X", "I-X"]
  p = inference.Predictor.from_config(c, label_names=names, seed=3)
  rng = np.random.default_rng(0)
  lines, gold = [], []
  for _ in range(12):
    tags = [names[i] for i in rng.integers(0, 3, int(rng.integers(1, 7)))]
    gold.append(tags)
    lines += [f"{'xyz'[:int(rng.integers(1, 4))]} {t}" for t in tags] + [""]
  path = tmp_path / "gold.conll"
  path.write_text("\n".join(lines), encoding="utf-8")
  result = p.evaluate(str(path))
  records, _ = p.read(str(path))
  preds = p.predict([r["words"] for r in records])
  assert result["truncated"] == sum(x["truncated"] for x in preds) > 0
  pred_tags = [[t or "O" for t in x["tags"]] for x in preds]
  ref = metrics_conll.span_f1(gold, pred_tags)
  for k in ("precision", "recall", "f1"):
    assert result["metrics"][f"span_{k}"] == pytest.approx(ref[k], abs=1e-6)
  assert "cut at the length read" in inference.format_report(result)
