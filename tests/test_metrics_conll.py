"""CoNLL span F1: hand-checked chunkings and the jit-able counts against the Python rules."""
import numpy as np
import jax
import pytest

from longtext_jax.metrics_conll import TagScheme, chunks, span_counts, span_f1

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.mark.parametrize("tags,expected", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
    # IOB1: I- after O or after another type opens a chunk.
    (["I-PER", "I-PER", "I-LOC", "O", "I-LOC"],
     [("PER", 0, 1), ("LOC", 2, 2), ("LOC", 4, 4)]),
    # B- right after I- of the same type splits.
    (["I-ORG", "B-ORG", "I-ORG"], [("ORG", 0, 0), ("ORG", 1, 2)]),
    # IOBES.
    (["S-PER", "B-LOC", "I-LOC", "E-LOC", "E-LOC", "O"],
     [("PER", 0, 0), ("LOC", 1, 3), ("LOC", 4, 4)]),
    (["O", "O"], []),
    (["B-MISC"], [("MISC", 0, 0)]),
])
def test_chunks_follow_conlleval(tags, expected):
  assert chunks(tags) == expected


def test_span_f1_hand_example():
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
  pred = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "O"]]  # PER boundary wrong.
  out = span_f1(gold, pred)
  assert (out["correct"], out["predicted"], out["gold"]) == (2, 3, 3)
  np.testing.assert_allclose(out["f1"], 2 / 3)
  assert span_f1([["O"]], [["O"]])["f1"] == 0.0
  with pytest.raises(ValueError):
    span_f1([["O", "O"]], [["O"]])
  with pytest.raises(ValueError):
    chunks(["X-PER"])


@pytest.mark.parametrize("names", [
    ("O", "B-PER", "I-PER", "B-LOC", "I-LOC"),
    ("O", "B-A", "I-A", "E-A", "S-A", "B-B", "I-B", "E-B", "S-B"),
])
def test_jax_counts_equal_python_rules_on_random_sequences(names):
  scheme = TagScheme.from_names(names)
  rng = np.random.default_rng(0)
  batch, length = 64, 9
  gold = rng.integers(0, len(names), (batch, length))
  pred = np.where(rng.random((batch, length)) < 0.6, gold,
                  rng.integers(0, len(names), (batch, length)))
  lengths = rng.integers(0, length + 1, batch)
  mask = np.arange(length)[None] < lengths[:, None]
  counts = jax.jit(lambda p, g, m: span_counts(p, g, m, scheme))(pred, gold, mask)
  as_str = lambda ids, n: [names[i] for i in ids[:n]]
  ref = span_f1([as_str(g, n) for g, n in zip(gold, lengths)],
                [as_str(p, n) for p, n in zip(pred, lengths)])
  assert float(counts["span_correct"]) == ref["correct"]
  assert float(counts["span_pred"]) == ref["predicted"]
  assert float(counts["span_gold"]) == ref["gold"]
  assert ref["correct"] > 0 and ref["correct"] < ref["gold"]  # a non-trivial check
