"""Heads, losses and metrics: padding never counts; metrics agree with direct formulas."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from longtext_jax import build_model, tasks
from longtext_jax.config import base_config


def task(name, **kw):
  c = base_config().task
  c.name = name
  c.update(kw)
  return tasks.get_task(c)


def test_filler_rows_and_pad_tokens_never_count():
  rng = np.random.default_rng(0)
  mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], bool)  # Row 2 is filler.
  cases = {
      "classification": ({"logits": rng.normal(size=(3, 4))}, {"label": np.array([1, 2, 3])}),
      "binary": ({"logits": rng.normal(size=(3, 1))}, {"label": np.array([1, 0, 1])}),
      "multilabel": ({"logits": rng.normal(size=(3, 4))},
                     {"labels": rng.integers(0, 2, (3, 4)).astype(np.float32)}),
      "regression": ({"predictions": rng.normal(size=(3, 2))},
                     {"target": rng.normal(size=(3, 2))}),
      "tagging": ({"logits": rng.normal(size=(3, 4, 5))}, {"tags": rng.integers(0, 5, (3, 4))}),
      "mlm": ({"logits": rng.normal(size=(3, 4, 6))},
              {"mlm_targets": rng.integers(0, 6, (3, 4)), "mlm_mask": np.ones((3, 4), bool)}),
      "lm": ({"logits": rng.normal(size=(3, 4, 6))}, {"input_ids": rng.integers(0, 6, (3, 4))}),
  }
  for name, (outputs, labels) in cases.items():
    t = task(name, num_classes=4 if name != "tagging" else 5, num_outputs=2, vocab_size=6)
    batch = {"mask": mask, **labels}
    m1 = t.metrics(outputs, batch)
    # Scramble everything that is padding or filler: nothing may change.
    o2 = {k: v.copy() for k, v in outputs.items()}
    b2 = {k: v.copy() for k, v in batch.items()}
    key = next(iter(o2))
    o2[key][2] = 99.0  # Filler row.
    if o2[key].ndim == 3:
      o2[key][0, 3] = 99.0  # A pad token.
      if name == "lm":
        b2["input_ids"][0, 3] = 5
    for lk in labels:
      if lk != "input_ids":
        b2[lk][2] = 1
    m2 = t.metrics(o2, b2)
    for k in m1:
      np.testing.assert_allclose(m1[k], m2[k], err_msg=f"{name}/{k}")


def test_classification_metrics_match_direct_formulas():
  logits = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, -1.0]])
  batch = {"mask": np.ones((3, 2), bool), "label": np.array([0, 0, 0])}
  t = task("classification", num_classes=2)
  s = t.summarize(t.metrics({"logits": logits}, batch))
  logp = jax.nn.log_softmax(logits)
  assert s["accuracy"] == pytest.approx(2 / 3)
  assert s["loss"] == pytest.approx(float(-logp[:, 0].mean()), rel=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_multilabel_f1_matches_numpy_reference(seed):
  rng = np.random.default_rng(seed)
  n, c = rng.integers(1, 9), rng.integers(1, 6)
  logits = rng.normal(size=(8, c))
  labels = rng.integers(0, 2, (8, c)).astype(np.float32)
  mask = np.ones((8, 3), bool)
  mask[rng.random(8) < 0.3] = False  # Filler rows,
  mask[n:] = False  # and up to 8 rows (one shape per c: the eager ops compile 5 times).
  t = task("multilabel", num_classes=int(c))
  s = t.summarize(jax.tree.map(np.asarray, t.metrics({"logits": logits},
                                                     {"mask": mask, "labels": labels})))
  keep = mask.any(-1)
  pred, gold = (logits[keep] > 0), labels[keep].astype(bool)
  tp, fp, fn = ((pred & gold).sum(0), (pred & ~gold).sum(0), (~pred & gold).sum(0))
  micro = 2 * tp.sum() / max(2 * tp.sum() + fp.sum() + fn.sum(), 1)
  per = [2 * a / (2 * a + b + d) if (2 * a + b + d) else 0.0 for a, b, d in zip(tp, fp, fn)]
  assert s["micro_f1"] == pytest.approx(micro, abs=1e-6)
  assert s["macro_f1"] == pytest.approx(np.mean(per), abs=1e-6)


def test_label_validation_names_the_example():
  t = task("classification", num_classes=3)
  batch = {"mask": np.ones((3, 2), bool), "label": np.array([0, 3, 1])}
  with pytest.raises(ValueError, match=r"example 'doc-b': label=3 is outside the label set"):
    t.validate(batch, np.array(["doc-a", "doc-b", "doc-c"]))
  t = task("tagging", num_classes=3)
  with pytest.raises(ValueError, match=r"example at batch row 1: tag=-1"):
    t.validate({"mask": np.array([[1, 1], [1, 1]], bool), "tags": np.array([[0, 1], [2, -1]])})
  # Tags at pads are not checked.
  t.validate({"mask": np.array([[1, 0]], bool), "tags": np.array([[0, -1]])})


def test_model_outputs_and_lm_requires_causal_encoder():
  c = base_config()
  c.task.name = "lm"
  c.task.vocab_size = c.model.vocab_size = 11
  c.model.d_model = 16
  c.model.encoder.num_layers = 1
  with pytest.raises(ValueError, match="needs a causal encoder"):
    build_model(c)
  c.model.encoder.causal = True
  model = build_model(c)
  batch = {"input_ids": jnp.ones((2, 5), jnp.int32), "mask": jnp.ones((2, 5), bool)}
  out = jax.jit(model.apply)(jax.jit(model.init)(jax.random.key(0), batch), batch)
  assert out["logits"].shape == (2, 5, 11)
  assert out["sequence"].shape == (2, 5, 16) and out["pooled"].shape == (2, 16)


def test_unknown_encoder_field_is_named():
  c = base_config()
  c.model.vocab_size = 5
  c.model.encoder.num_layerz = 2
  with pytest.raises(ValueError, match=r"no field\(s\) \['num_layerz'\]"):
    build_model(c)
