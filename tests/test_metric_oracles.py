"""Our metrics against outside references, on many small random cases.

* CoNLL span F1 (``metrics_conll`` and the ``span_tagging`` task's jit-able counts) against
  ``seqeval``: its default (``conlleval``-compatible) chunking on arbitrary tag strings
  (IOB1, IOB2 and IOBES tags mixed, ill-formed sequences included), and its strict mode with
  the IOB2 / IOBES schemes on well-formed sequences, where every convention agrees.
* MCC, accuracy, micro/macro F1 and exact match (``classification``, ``binary``,
  ``multilabel`` tasks and :func:`tasks.matthews_corrcoef`) against ``scikit-learn``.
* The CRF's log Z, log-likelihood and Viterbi path against brute-force enumeration of every
  tag path (in float64), with padding and holes in the mask.

``seqeval`` and ``scikit-learn`` are test-only oracles (the ``oracle`` extra, ``make oracle``);
the tests that need one skip, naming the install command, when it is missing. The tests
reach our code through stable names only: ``tasks.get_task(config)`` and a task's
``metrics``/``summarize``/``loss``/``decode``, ``tasks.matthews_corrcoef``,
``metrics_conll.{chunks, span_f1}`` and ``layers.crf.crf_*``.
"""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from longtext_jax import config as config_lib
from longtext_jax import metrics_conll, tasks
from longtext_jax.layers import crf as crf_lib

jax.config.update("jax_numpy_rank_promotion", "raise")

SEQEVAL_HINT = "oracle seqeval missing: pip install seqeval==1.2.2 (or make oracle)"
SKLEARN_HINT = "oracle scikit-learn missing: pip install scikit-learn==1.9.1 (or make oracle)"


def _seqeval():
  return pytest.importorskip("seqeval.metrics", reason=SEQEVAL_HINT)


def _sklearn_metrics():
  return pytest.importorskip("sklearn.metrics", reason=SKLEARN_HINT)


def _task(**fields):
  config = config_lib.base_config().task  # Every task field at its default.
  config.update(fields)
  return tasks.get_task(config)


# ----------------------------------------------------------------------------------------
# Span F1 against seqeval.

TYPES = ("PER", "LOC", "X-Y")  # 'X-Y': a type holding the separator.
IOB2_NAMES = ("O",) + tuple(f"{k}-{t}" for t in TYPES for k in "BI")
IOBES_NAMES = ("O",) + tuple(f"{k}-{t}" for t in TYPES for k in "BIES")
ALL_TAGS = ("O",) + tuple(f"{k}-{t}" for t in TYPES for k in "BIES")


def _segments(rng, length):
  """A random segmentation of ``length`` positions: [(type or None, size)]."""
  out, left = [], length
  while left:
    size = int(rng.integers(1, min(left, 4) + 1))
    out.append((None if rng.random() < 0.35 else TYPES[rng.integers(len(TYPES))], size))
    left -= size
  return out


def _mutate(rng, segments):
  """Predicted segments: gold ones with some types changed, chunks dropped, split or added."""
  out = []
  for typ, size in segments:
    r = rng.random()
    if r < 0.1:
      typ = TYPES[rng.integers(len(TYPES))] if typ is None else None
    elif r < 0.2 and typ is not None:
      typ = TYPES[rng.integers(len(TYPES))]
    if r > 0.85 and size > 1:
      cut = int(rng.integers(1, size))
      out += [(typ, cut), (typ, size - cut)]
    else:
      out.append((typ, size))
  return out


def _render(segments, scheme):
  """Well-formed tags of ``segments`` in 'IOB2' or 'IOBES'."""
  tags = []
  for typ, size in segments:
    if typ is None:
      tags += ["O"] * size
    elif scheme == "IOBES" and size == 1:
      tags.append(f"S-{typ}")
    elif scheme == "IOBES":
      tags += [f"B-{typ}"] + [f"I-{typ}"] * (size - 2) + [f"E-{typ}"]
    else:
      tags += [f"B-{typ}"] + [f"I-{typ}"] * (size - 1)
  return tags


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(ALL_TAGS), max_size=12))
def test_chunks_equal_seqeval_entities_on_arbitrary_tags(tags):
  """conlleval's chunking (seqeval's default mode) on any tag string, ill-formed included."""
  sequence_labeling = pytest.importorskip("seqeval.metrics.sequence_labeling",
                                          reason=SEQEVAL_HINT)
  assert sorted(metrics_conll.chunks(tags)) == sorted(sequence_labeling.get_entities(tags))


def _span_counts_by_task(names, gold_ids, pred_ids, mask):
  """(precision, recall, f1) of the span_tagging task's jit-able path."""
  task = _task(name="span_tagging", num_classes=len(names), tag_names=names)
  outputs = {"logits": jax.nn.one_hot(pred_ids, len(names))}
  batch = {"tags": jnp.asarray(gold_ids), "mask": jnp.asarray(mask)}
  sums = jax.device_get(jax.jit(task.metrics)(outputs, batch))
  out = task.summarize(sums)
  return out["span_precision"], out["span_recall"], out["span_f1"]


def _seqeval_prf(metrics, gold, pred, **kw):
  kw.setdefault("zero_division", 0)
  return (metrics.precision_score(gold, pred, **kw), metrics.recall_score(gold, pred, **kw),
          metrics.f1_score(gold, pred, **kw))


@pytest.mark.parametrize("seed", range(6))
def test_span_f1_equals_seqeval_default_mode_on_random_ids(seed):
  """Random tag ids (any order, ill-formed too) with padding: ours (Python and jit) == seqeval."""
  metrics = _seqeval()
  rng = np.random.default_rng(seed)
  names = IOBES_NAMES if seed % 2 else IOB2_NAMES
  batch, length = 48, 10
  gold = rng.integers(0, len(names), (batch, length))
  pred = np.where(rng.random((batch, length)) < 0.5, gold,
                  rng.integers(0, len(names), (batch, length)))
  lengths = rng.integers(0, length + 1, batch)
  mask = np.arange(length)[None] < lengths[:, None]
  as_str = lambda ids, n: [names[i] for i in ids[:n]]
  gold_s = [as_str(g, n) for g, n in zip(gold, lengths)]
  pred_s = [as_str(p, n) for p, n in zip(pred, lengths)]
  want = _seqeval_prf(metrics, gold_s, pred_s)
  py = metrics_conll.span_f1(gold_s, pred_s)
  np.testing.assert_allclose((py["precision"], py["recall"], py["f1"]), want, rtol=1e-12)
  np.testing.assert_allclose(_span_counts_by_task(names, gold, pred, mask), want, rtol=1e-6)


@pytest.mark.parametrize("scheme_name", ["IOB2", "IOBES"])
@pytest.mark.parametrize("seed", range(4))
def test_span_f1_equals_seqeval_strict_mode_on_wellformed_tags(scheme_name, seed):
  """Well-formed IOB2 / IOBES: seqeval's strict scheme, its default mode and ours agree."""
  metrics = _seqeval()
  scheme = pytest.importorskip("seqeval.scheme", reason=SEQEVAL_HINT)
  names = IOB2_NAMES if scheme_name == "IOB2" else IOBES_NAMES
  rng = np.random.default_rng(100 + seed)
  batch, length = 40, 12
  gold_s, pred_s = [], []
  for _ in range(batch):
    n = int(rng.integers(0, length + 1))
    segs = _segments(rng, n)
    gold_s.append(_render(segs, scheme_name))
    pred_s.append(_render(_mutate(rng, segs), scheme_name))
  strict = _seqeval_prf(metrics, gold_s, pred_s, mode="strict",
                        scheme=getattr(scheme, scheme_name))
  np.testing.assert_allclose(_seqeval_prf(metrics, gold_s, pred_s), strict, rtol=1e-12)
  py = metrics_conll.span_f1(gold_s, pred_s)
  np.testing.assert_allclose((py["precision"], py["recall"], py["f1"]), strict, rtol=1e-12)
  ids = lambda seqs: np.array([[names.index(t) for t in s] + [0] * (length - len(s))
                               for s in seqs])
  mask = np.array([[i < len(s) for i in range(length)] for s in gold_s])
  np.testing.assert_allclose(_span_counts_by_task(names, ids(gold_s), ids(pred_s), mask),
                             strict, rtol=1e-6)
  assert 0 < strict[2] < 1  # The cases mix hits and misses.


def test_span_f1_without_any_chunk_is_zero_like_seqeval():
  metrics = _seqeval()
  gold, pred = [["O", "O"], []], [["O", "O"], []]
  assert _seqeval_prf(metrics, gold, pred) == (0.0, 0.0, 0.0)
  py = metrics_conll.span_f1(gold, pred)
  assert (py["precision"], py["recall"], py["f1"]) == (0.0, 0.0, 0.0)


# ----------------------------------------------------------------------------------------
# MCC, accuracy, F1 against scikit-learn.

BATCH = 20  # One shape, one compilation; the number of real rows varies through the mask.


def _random_rows(rng, batch=BATCH, length=3):
  """mask bool[B, length]: the first 1..B rows real, a few of them emptied (weight 0)."""
  mask = np.zeros((batch, length), bool)
  mask[:int(rng.integers(1, batch + 1))] = True
  mask[rng.random(batch) < 0.15] = False
  return mask


@pytest.mark.filterwarnings("ignore:A single label was found")
@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(2, 5).flatmap(lambda c: st.tuples(
    st.just(c), st.lists(st.tuples(st.integers(0, c - 1), st.integers(0, c - 1)),
                         min_size=1, max_size=30))))
def test_matthews_corrcoef_of_confusion_equals_sklearn(case):
  """Any confusion matrix, degenerate ones (a single gold or predicted class) included."""
  skm = _sklearn_metrics()
  num_classes, pairs = case
  gold, pred = (np.array(x) for x in zip(*pairs))
  confusion = skm.confusion_matrix(gold, pred, labels=range(num_classes))
  want = skm.matthews_corrcoef(gold, pred)
  np.testing.assert_allclose(tasks.matthews_corrcoef(confusion), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("num_classes", [2, 3, 5])
@pytest.mark.filterwarnings("ignore:A single label was found")
def test_classification_accuracy_and_mcc_equal_sklearn(num_classes):
  skm = _sklearn_metrics()
  task = _task(name="classification", num_classes=num_classes)
  metrics = jax.jit(task.metrics)
  rng = np.random.default_rng(num_classes)
  for trial in range(20):
    batch = BATCH
    label = rng.integers(0, num_classes, batch)
    # Logits near the label for some rows, so MCC spans negative, zero and positive values.
    logits = rng.normal(size=(batch, num_classes)) + 2 * (trial % 3) * np.eye(num_classes)[label]
    if trial == 0:
      logits = np.zeros_like(logits)  # One predicted class only: MCC undefined -> 0.
    mask = _random_rows(rng, batch)
    sums = jax.device_get(metrics({"logits": jnp.asarray(logits, jnp.float32)},
                                  {"label": jnp.asarray(label), "mask": jnp.asarray(mask)}))
    out = task.summarize(sums)
    real = mask.any(-1)
    if not real.any():
      continue
    pred = logits.argmax(-1)
    np.testing.assert_allclose(out["accuracy"], skm.accuracy_score(label[real], pred[real]),
                               rtol=1e-6)
    np.testing.assert_allclose(out["mcc"], skm.matthews_corrcoef(label[real], pred[real]),
                               rtol=1e-5, atol=1e-6)
    # sklearn's macro average runs over the classes seen as gold or predicted, as ours.
    np.testing.assert_allclose(out["macro_f1"], skm.f1_score(
        label[real], pred[real], average="macro", zero_division=0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threshold", [0.5, 0.3])
def test_binary_accuracy_and_f1_equal_sklearn(threshold):
  """At ``task.threshold``: class 1 predicted where its probability exceeds it."""
  skm = _sklearn_metrics()
  task = _task(name="binary", threshold=threshold)
  metrics = jax.jit(task.metrics)
  rng = np.random.default_rng(7)
  for trial in range(30):
    batch = BATCH
    label = rng.integers(0, 2, batch)
    logits = rng.normal(size=(batch, 1)) + (trial % 3) * (2 * label[:, None] - 1)
    if trial % 10 == 0:
      logits = -np.abs(logits)  # Nothing predicted positive: F1 undefined -> 0.
    mask = _random_rows(rng, batch)
    sums = jax.device_get(metrics({"logits": jnp.asarray(logits, jnp.float32)},
                                  {"label": jnp.asarray(label), "mask": jnp.asarray(mask)}))
    out = task.summarize(sums)
    real = mask.any(-1)
    if not real.any():
      continue
    pred = (1 / (1 + np.exp(-logits[:, 0])) > threshold).astype(int)
    np.testing.assert_allclose(out["accuracy"], skm.accuracy_score(label[real], pred[real]),
                               rtol=1e-6)
    np.testing.assert_allclose(out["f1"], skm.f1_score(label[real], pred[real],
                                                       zero_division=0), rtol=1e-6)
    np.testing.assert_allclose(out["macro_f1"], skm.f1_score(
        label[real], pred[real], average="macro", labels=[0, 1], zero_division=0), rtol=1e-6)


@pytest.mark.parametrize("num_classes,threshold", [(2, 0.5), (3, 0.5), (6, 0.5), (3, 0.7)])
def test_multilabel_micro_macro_f1_and_exact_match_equal_sklearn(num_classes, threshold):
  """Macro F1 averages over every class; a class never gold nor predicted scores 0
  (scikit-learn's ``zero_division=0``); a class is predicted above ``task.threshold``.
  (Two classes: (n, 1) targets would be 'binary' to scikit-learn.)"""
  skm = _sklearn_metrics()
  task = _task(name="multilabel", num_classes=num_classes, threshold=threshold)
  metrics = jax.jit(task.metrics)
  rng = np.random.default_rng(num_classes)
  for trial in range(20):
    batch = BATCH
    labels = (rng.random((batch, num_classes)) < rng.uniform(0.05, 0.6)).astype(np.float32)
    logits = rng.normal(size=(batch, num_classes)) + (trial % 3) * (2 * labels - 1)
    if trial % 7 == 0:
      logits[:, 0] = -1.0  # Class 0 never predicted.
    mask = _random_rows(rng, batch)
    sums = jax.device_get(metrics({"logits": jnp.asarray(logits, jnp.float32)},
                                  {"labels": jnp.asarray(labels), "mask": jnp.asarray(mask)}))
    out = task.summarize(sums)
    real = mask.any(-1)
    if not real.any():
      continue
    gold = labels[real].astype(int)
    pred = (1 / (1 + np.exp(-logits[real])) > threshold).astype(int)
    for average in ("micro", "macro"):
      np.testing.assert_allclose(
          out[f"{average}_f1"], skm.f1_score(gold, pred, average=average, zero_division=0),
          rtol=1e-6, err_msg=f"{average} F1, trial {trial}")
    np.testing.assert_allclose(out["exact_match"], skm.accuracy_score(gold, pred), rtol=1e-6)


# ----------------------------------------------------------------------------------------
# The CRF against brute-force enumeration.

def _brute(em_LC, mask_L, trans_CC, start_C, end_C):
  """{path over the real positions: float64 score}, straight from the definition."""
  real = np.flatnonzero(mask_L)
  num_tags = em_LC.shape[-1]
  out = {}
  for path in itertools.product(range(num_tags), repeat=len(real)):
    if not path:
      out[path] = 0.0
      continue
    s = start_C[path[0]] + end_C[path[-1]] + sum(em_LC[t, y] for t, y in zip(real, path))
    s += sum(trans_CC[a, b] for a, b in zip(path[:-1], path[1:]))
    out[path] = float(s)
  return out


def _logsumexp(values):
  values = np.asarray(values, np.float64)
  top = values.max()
  return float(top + np.log(np.exp(values - top).sum()))


@pytest.mark.parametrize("num_tags,length", [(2, 1), (2, 6), (3, 4), (4, 3), (5, 2)])
def test_crf_log_z_likelihood_and_viterbi_equal_brute_force(num_tags, length):
  """Random scores (scale up to 4) and random masks: full, padded, holes, empty rows."""
  rng = np.random.default_rng(num_tags * 10 + length)
  batch = 24
  for scale in (0.5, 4.0):
    em = (scale * rng.normal(size=(batch, length, num_tags))).astype(np.float32)
    trans, start, end = ((scale * rng.normal(size=s)).astype(np.float32)
                         for s in ((num_tags, num_tags), (num_tags,), (num_tags,)))
    mask = rng.random((batch, length)) < 0.7
    mask[0], mask[1] = True, False  # A full row and an empty one, always.
    tags = rng.integers(0, num_tags, (batch, length))
    args = (jnp.asarray(trans), jnp.asarray(start), jnp.asarray(end))
    log_z = np.asarray(jax.jit(crf_lib.crf_log_partition)(em, mask, *args))
    ll = np.asarray(jax.jit(crf_lib.crf_log_likelihood)(em, tags, mask, *args))
    best, best_score = (np.asarray(x) for x in jax.jit(crf_lib.crf_viterbi)(em, mask, *args))
    for b in range(batch):
      scores = _brute(em[b].astype(np.float64), mask[b], trans.astype(np.float64),
                      start.astype(np.float64), end.astype(np.float64))
      want_z = _logsumexp(list(scores.values()))
      gold = tuple(int(t) for t in tags[b][mask[b]])
      np.testing.assert_allclose(log_z[b], want_z, rtol=1e-5, atol=1e-4)
      np.testing.assert_allclose(ll[b], scores[gold] - want_z, rtol=1e-5, atol=1e-4)
      ranked = sorted(scores.items(), key=lambda kv: -kv[1])
      np.testing.assert_allclose(best_score[b], ranked[0][1], rtol=1e-5, atol=1e-4)
      assert np.all(best[b][~mask[b]] == 0), "pads must decode to tag 0"
      if len(ranked) == 1 or ranked[0][1] - ranked[1][1] > 1e-3:  # Skip float32 near-ties.
        assert tuple(best[b][mask[b]]) == ranked[0][0], (b, scale)
      else:
        np.testing.assert_allclose(scores[tuple(best[b][mask[b]])], ranked[0][1], atol=1e-3)


def test_crf_tagging_task_loss_and_decode_equal_brute_force():
  """The crf_tagging task's NLL sum and Viterbi decode over a padded batch."""
  num_tags, length, batch = 3, 4, 8
  task = _task(name="crf_tagging", num_classes=num_tags)
  rng = np.random.default_rng(3)
  em = rng.normal(size=(batch, length, num_tags)).astype(np.float32)
  trans = rng.normal(size=(num_tags, num_tags)).astype(np.float32)
  start, end = (rng.normal(size=(num_tags,)).astype(np.float32) for _ in range(2))
  lengths = rng.integers(0, length + 1, batch)
  mask = np.arange(length)[None] < lengths[:, None]
  tags = rng.integers(0, num_tags, (batch, length))
  outputs = {"crf": {"emissions": jnp.asarray(em), "transitions": jnp.asarray(trans),
                     "start": jnp.asarray(start), "end": jnp.asarray(end)}}
  batch_d = {"tags": jnp.asarray(tags), "mask": jnp.asarray(mask)}
  loss_sum, weight = jax.jit(task.loss)(outputs, batch_d)
  decoded = np.asarray(jax.jit(task.viterbi)(outputs, batch_d["mask"]))
  named = task.decode(outputs, ("A", "B", "C"), batch_d)  # The user-facing form.
  want_nll, want_decode = 0.0, np.zeros_like(tags)
  for b in range(batch):
    scores = _brute(em[b].astype(np.float64), mask[b], trans, start, end)
    want_nll -= scores[tuple(tags[b][mask[b]])] - _logsumexp(list(scores.values()))
    want_decode[b][mask[b]] = max(scores, key=scores.get)
  np.testing.assert_allclose(float(loss_sum), want_nll, rtol=1e-5)
  assert float(weight) == mask.sum()
  np.testing.assert_array_equal(decoded, want_decode)
  assert [d["tags"] for d in named] == [["ABC"[t] for t in want_decode[b][:n]]
                                        for b, n in enumerate(lengths)]
