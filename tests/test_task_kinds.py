"""The Task contract: kinds own their layout, metric names and decoding; a new kind is one
class plus one registry line; encoders declare their call contract; imports stay light."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from longtext_jax import data as data_lib
from longtext_jax import encoders, tasks
from longtext_jax.config import base_config
from longtext_jax.model import build_model
from longtext_jax.tasks import base as task_base
from longtext_jax.tasks import losses
from longtext_jax.tasks.heads import PooledHead

TAG_NAMES = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def _task(name, **kw):
  c = base_config().task
  c.name = name
  c.update(kw)
  return tasks.get_task(c)


def _random_case(name, rng):
  """(task, outputs, batch) for one registered kind, B=3, L=5, with a filler row."""
  mask = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], bool)
  kw = dict(num_classes=5, num_outputs=2, vocab_size=7)
  if name in ("span_tagging", "crf_tagging"):
    kw["tag_names"] = TAG_NAMES
  t = _task(name, **kw)
  b = {"mask": mask, "input_ids": rng.integers(0, 7, (3, 5)).astype(np.int32),
       "token_type_ids": np.array([[0, 0, 1, 1, 0], [0, 1, 0, 0, 0], [0] * 5], np.int32)}
  fields = {"label": rng.integers(0, 2 if name == "binary" else 5, 3).astype(np.int32),
            "labels": rng.integers(0, 2, (3, 5)).astype(np.float32),
            "target": rng.normal(size=(3, 2)).astype(np.float32),
            "tags": rng.integers(0, 5, (3, 5)).astype(np.int32),
            "mlm_targets": rng.integers(0, 7, (3, 5)).astype(np.int32),
            "mlm_mask": rng.random((3, 5)) < 0.5}
  for key in t.label_keys:
    b[key] = fields[key]
  logits = {"classification": (3, 5), "pair_classification": (3, 5), "binary": (3, 1),
            "multilabel": (3, 5), "tagging": (3, 5, 5), "span_tagging": (3, 5, 5),
            "mlm": (3, 5, 7), "lm": (3, 5, 7)}
  if name == "regression":
    out = {"predictions": rng.normal(size=(3, 2)).astype(np.float32)}
  elif name == "crf_tagging":
    out = {"crf": {"emissions": rng.normal(size=(3, 5, 5)).astype(np.float32),
                   "transitions": rng.normal(size=(5, 5)).astype(np.float32),
                   "start": rng.normal(size=5).astype(np.float32),
                   "end": rng.normal(size=5).astype(np.float32)}}
  else:
    out = {"logits": rng.normal(size=logits[name]).astype(np.float32)}
  return t, out, b


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_every_kind_states_its_contract(name):
  """metric_names are exactly summarize()'s keys; the kind reads only its batch_keys; its
  layout is a known one; validate accepts its own well-formed batch."""
  t, out, b = _random_case(name, np.random.default_rng(0))
  assert t.name == name and t.label_layout in tasks.LAYOUTS
  summary = t.summarize(jax.tree.map(np.asarray, t.metrics(out, b)))
  assert tuple(summary) == t.metric_names
  # Reading only batch_keys: the metrics of the batch restricted to them are the same.
  only = {k: v for k, v in b.items() if k in t.batch_keys}
  again = t.summarize(jax.tree.map(np.asarray, t.metrics(out, only)))
  np.testing.assert_equal(again, summary)
  t.validate({k: v for k, v in b.items()}, None)
  assert set(t.label_keys) <= set(t.batch_keys)


def test_span_kinds_name_span_metrics_only_with_tag_names():
  assert "span_f1" not in _task("span_tagging", num_classes=5).metric_names
  assert _task("crf_tagging", num_classes=5, tag_names=TAG_NAMES).metric_names[-1] == "span_f1"


def test_layouts_and_model_questions():
  expect = {"classification": ("label", 5), "binary": ("label", 2),
            "pair_classification": ("label", 5), "multilabel": ("multi_hot", 5),
            "regression": ("targets", 0), "tagging": ("tags", 5), "span_tagging": ("tags", 5),
            "crf_tagging": ("tags", 5), "mlm": ("mlm", 0), "lm": ("none", 0)}
  for name, (layout, classes) in expect.items():
    t = _task(name, num_classes=5)
    assert (t.label_layout, t.num_label_classes) == (layout, classes), name
  assert [n for n, k in tasks.TASKS.items() if k.needs_causal_encoder] == ["lm"]
  assert sorted(n for n, k in tasks.TASKS.items() if k.predicts_tokens) == ["lm", "mlm"]
  assert [n for n, k in tasks.TASKS.items() if k.pairs] == ["pair_classification"]


@pytest.mark.parametrize("seed", [0, 1])
def test_jnp_losses_equal_optax(seed):
  rng = np.random.default_rng(seed)
  logits = jnp.asarray(rng.normal(size=(4, 6, 9)) * 30, jnp.float32)  # Large: stability.
  labels = jnp.asarray(rng.integers(0, 9, (4, 6)))
  np.testing.assert_allclose(
      losses.softmax_cross_entropy_with_integer_labels(logits, labels),
      optax.softmax_cross_entropy_with_integer_labels(logits, labels), rtol=1e-6, atol=0)
  x = logits[..., 0]
  y = jnp.asarray(rng.integers(0, 2, (4, 6)))
  np.testing.assert_allclose(losses.sigmoid_binary_cross_entropy(x, y),
                             optax.sigmoid_binary_cross_entropy(x, y), rtol=1e-6, atol=0)


# ------------------------------------------------------------------------------ decode


def test_decode_classification_binary_multilabel_regression():
  rng = np.random.default_rng(1)
  names = ["a", "b", "c", "d", "e"]
  t, out, b = _random_case("classification", rng)
  dec = t.decode(out, names)
  for row, logits in zip(dec, out["logits"]):
    assert row["label"] == names[int(np.argmax(logits))]
    np.testing.assert_allclose(row["probabilities"], jax.nn.softmax(logits), rtol=1e-5)
  assert t.decode(out)[0]["label"] == int(np.argmax(out["logits"][0]))

  t, out, _ = _random_case("binary", rng)
  out["logits"][:, 0] = [2.0, -1.0, 0.0]
  dec = t.decode(out, ["neg", "pos"])
  assert [r["label"] for r in dec] == ["pos", "neg", "neg"]  # P = 0.5 is not above 0.5.
  np.testing.assert_allclose(dec[0]["probabilities"], [1 - jax.nn.sigmoid(2.0),
                                                       jax.nn.sigmoid(2.0)], rtol=1e-6)

  t, out, _ = _random_case("multilabel", rng)
  dec = t.decode(out, names)
  for row, logits in zip(dec, out["logits"]):
    assert row["labels"] == [n for n, x in zip(names, logits) if x > 0]  # Same as metrics.
  strict = _task("multilabel", num_classes=5, threshold=0.9).decode(out, names)
  for row in strict:
    assert row["labels"] == [n for n, p in zip(names, row["probabilities"]) if p > 0.9]

  t, out, _ = _random_case("regression", rng)
  np.testing.assert_allclose([r["value"] for r in t.decode(out)], out["predictions"],
                             rtol=1e-6)


def test_decode_tags_are_trimmed_and_crf_decode_is_viterbi():
  rng = np.random.default_rng(2)
  t, out, b = _random_case("tagging", rng)
  dec = t.decode(out, TAG_NAMES, batch=b)
  assert [len(r["tags"]) for r in dec] == [4, 2, 0]
  assert dec[0]["tags"] == [TAG_NAMES[i] for i in np.argmax(out["logits"][0, :4], -1)]
  assert len(t.decode(out)[0]["tags"]) == 5  # No batch: every position.

  t, out, b = _random_case("crf_tagging", rng)
  dec = t.decode(out, batch=b)
  viterbi = np.asarray(t.viterbi(out, jnp.asarray(b["mask"])))
  assert dec[0]["tags"] == viterbi[0, :4].tolist() and dec[1]["tags"] == viterbi[1, :2].tolist()
  # The decoded path is the best one: its score beats every other path of row 1 (length 2).
  e, tr, st, en = (out["crf"][k] for k in ("emissions", "transitions", "start", "end"))
  score = lambda p: st[p[0]] + e[1, 0, p[0]] + tr[p[0], p[1]] + e[1, 1, p[1]] + en[p[1]]
  best = max(((i, j) for i in range(5) for j in range(5)), key=score)
  assert tuple(dec[1]["tags"]) == best


def test_decode_lm_log_likelihood_is_minus_the_loss_and_mlm_fills_the_masks():
  rng = np.random.default_rng(3)
  t, out, b = _random_case("lm", rng)
  dec = t.decode(out, batch=b)
  assert [len(r["token_log_likelihood"]) for r in dec] == [3, 1, 0]
  loss_sum, weight = t.loss(out, b)
  total = sum(r["log_likelihood"] for r in dec)
  assert total == pytest.approx(-float(loss_sum), rel=1e-5)
  assert sum(len(r["token_log_likelihood"]) for r in dec) == int(weight)
  with pytest.raises(ValueError, match="input_ids"):
    t.decode(out)

  t, out, b = _random_case("mlm", rng)
  dec = t.decode(out, batch=b)
  pred = np.argmax(out["logits"], -1)
  for r, row in enumerate(dec):
    n = int(b["mask"][r].sum())
    want = np.where(b["mlm_mask"][r], pred[r], b["input_ids"][r])[:n]
    assert row["tokens"] == want.tolist()


# ------------------------------------------------------------- a new kind: one class, one line


@dataclasses.dataclass(frozen=True)
class HingeClassification(task_base.Task):
  """A toy kind as a new file would define it: multi-class hinge loss on one label."""
  name = "toy_hinge"
  label_fields = {"label": "int32"}
  label_layout = "label"
  base_metric_names = ("loss", "accuracy")

  def head(self):
    return PooledHead(self.config.num_classes)

  def loss(self, outputs, batch):
    w_B = losses.example_weight(batch)
    logits_BC = outputs["logits"].astype(jnp.float32)
    gold_B = jnp.take_along_axis(logits_BC, batch["label"][:, None], -1)[:, 0]
    margin_BC = jnp.maximum(0.0, 1.0 + logits_BC - gold_B[:, None])
    other_BC = 1.0 - jax.nn.one_hot(batch["label"], logits_BC.shape[-1])
    return jnp.sum(jnp.sum(margin_BC * other_BC, -1) * w_B), jnp.sum(w_B)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_B = losses.example_weight(batch)
    hit_B = (jnp.argmax(outputs["logits"], -1) == batch["label"]).astype(jnp.float32)
    sums.update(correct=jnp.sum(hit_B * w_B), count=jnp.sum(w_B))
    return sums

  def summarize(self, sums):
    return {"loss": losses.ratio(sums["loss_sum"], sums["loss_weight"]),
            "accuracy": losses.ratio(sums["correct"], sums["count"])}


def _toy_config(tmp_path):
  docs = [("aaaa", "x"), ("bbbb", "y"), ("aaab", "x"), ("bbba", "y"), ("abab", "x"),
          ("baba", "y")]
  for split in ("train", "eval"):
    with open(tmp_path / f"{split}.jsonl", "w") as f:
      for text, label in docs:
        f.write(json.dumps({"text": text, "label": label}) + "\n")
  c = base_config()
  c.task.name, c.task.num_classes = "toy_hinge", 2
  c.data.name = "local"
  c.data.train_path, c.data.eval_path = str(tmp_path / "train.jsonl"), str(
      tmp_path / "eval.jsonl")
  c.model.vocab_size, c.model.d_model = 300, 16
  c.model.encoder.num_layers = 1
  return c


def test_a_new_task_kind_is_one_class_plus_one_registry_line(tmp_path, monkeypatch):
  monkeypatch.setitem(tasks.TASKS, HingeClassification.name, HingeClassification)
  c = _toy_config(tmp_path)
  task = tasks.get_task(c.task)
  # Data asks the kind for its layout: names 'x'/'y' become label ids.
  splits = data_lib.build_splits(c, task)
  batch = {k: jnp.asarray(v) for k, v in next(iter(data_lib.eval_batches(
      splits["train"], 6))).items() if k != "example_id"}
  assert sorted(np.asarray(batch["label"]).tolist()) == [0, 0, 0, 1, 1, 1]
  model = build_model(c)
  params = model.init(jax.random.key(0), batch)["params"]

  def objective(p):
    total, weight = task.loss(model.apply({"params": p}, batch), batch)
    return total / weight

  step = jax.jit(lambda p: jax.tree.map(lambda w, g: w - 0.1 * g, p,
                                        jax.grad(objective)(p)))
  first = float(objective(params))
  for _ in range(15):
    params = step(params)
  assert float(objective(params)) < 0.5 * first
  summary = task.summarize(task.metrics(model.apply({"params": params}, batch), batch))
  assert tuple(summary) == task.metric_names and summary["accuracy"] == 1.0


def _toy_source(config, task):
  """A data source as a new file would define it: ``source(config, task) -> {split: arrays}``,
  asking the task for the layout it needs (here: one int label per document)."""
  assert task.label_layout == "label", task.label_layout
  rng = np.random.default_rng(config.seed)
  def split(n):
    ids = rng.integers(5, config.model.vocab_size, size=(n, config.data.seq_len), dtype=np.int32)
    return {"input_ids": ids, "mask": np.ones_like(ids, bool),
            "label": (ids[:, 0] % 2).astype(np.int32)}
  return {"train": split(config.data.num_train), "eval": split(config.data.num_eval)}


def test_a_new_data_source_is_one_function_plus_one_registry_line(monkeypatch):
  """Registered in ``data.SOURCES`` (the one line), the source passes ``validate`` and
  ``build_splits`` as any other; its labels are checked against the task's label set."""
  from longtext_jax.config import validate  # pylint: disable=import-outside-toplevel
  c = base_config()
  c.task.name, c.task.num_classes = "classification", 2
  c.data.name = "toy_source"
  c.data.seq_len, c.data.num_train, c.data.num_eval = 8, 6, 4
  c.model.vocab_size = 50
  with pytest.raises(ValueError, match=r"data.name.*toy_source"):
    validate(c)  # Not registered yet: the error names the field and the choices.
  monkeypatch.setitem(data_lib.SOURCES, "toy_source", _toy_source)
  validate(c)
  splits = data_lib.build_splits(c, tasks.get_task(c.task))
  assert {k: len(v) for k, v in splits.items()} == {"train": 6, "eval": 4}
  labels = splits["train"].arrays["label"]
  np.testing.assert_array_equal(labels, splits["train"].arrays["input_ids"][:, 0] % 2)
  c.task.num_classes = 1  # Label 1 is now outside the label set: named before training.
  with pytest.raises(ValueError, match=r"train split: .*example"):
    data_lib.build_splits(c, tasks.get_task(c.task))


# ------------------------------------------------------------------ encoders and imports


def test_every_encoder_declares_its_call_contract():
  kinds = {name: encoders.input_kind(cls) for name, cls in encoders.ENCODERS.items()}
  assert {n for n, k in kinds.items() if k == "ids"} == {
      "chunk_bert", "bert_first", "bert_random", "tobert"}
  assert set(kinds.values()) <= set(encoders.INPUT_KINDS)

  class NoContract:  # pylint: disable=too-few-public-methods
    pass
  with pytest.raises(TypeError, match="input_kind"):
    encoders.input_kind(NoContract)


def test_input_kind_mismatch_is_refused():
  c = base_config()
  c.model.vocab_size = 50
  c.model.input = "ids"
  with pytest.raises(ValueError, match="takes embeddings"):
    build_model(c)
  c.model.input = "tokens"
  c.model.encoder = ml_collections.ConfigDict({"name": "bert_first"})
  with pytest.raises(ValueError, match="embeds ids itself"):
    build_model(c)


HEAVY = ("optax", "orbax", "grain", "tensorflow_datasets", "tensorflow",
         "longtext_jax.train", "longtext_jax.data")


@pytest.mark.parametrize("statement", [
    "from longtext_jax.encoders import RAN",
    "import longtext_jax.encoders",
    "import longtext_jax.model",
    "from longtext_jax import build_model",
    "import longtext_jax.tasks",
    "import longtext_jax.encoders.bert_checkpoint",
])
def test_model_side_imports_pull_no_trainer_or_data_stack(statement):
  code = (f"import sys\n{statement}\nheavy = {HEAVY!r}\n"
          "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy "
          "or m.startswith(heavy[-2:])))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, check=True)
  assert out.stdout.strip() == "[]", f"{statement} imported {out.stdout.strip()}"
