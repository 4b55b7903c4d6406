"""Synthetic data and batching: determinism, exact iterator resume, eval coverage."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from longtext_jax import data
from longtext_jax.data import pipeline, synthetic


def test_masked_summation_targets_and_determinism():
  a = synthetic.masked_summation(50, 30, 4, 5, seed=3)
  b = synthetic.masked_summation(50, 30, 4, 5, seed=3)
  c = synthetic.masked_summation(50, 30, 4, 5, seed=4)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  assert not np.array_equal(a["features"], c["features"])
  bits = a["features"][..., 0]
  assert set(np.unique(bits)) == {0.0, 1.0}
  np.testing.assert_array_equal(bits.sum(1), 4)  # Exactly k ones per example.
  values = a["features"][..., 1:]
  assert values.min() >= 0 and values.max() < 1
  direct = np.array([[values[n, i] for i in range(30) if bits[n, i] == 1] for n in range(50)])
  np.testing.assert_allclose(a["target"], direct.sum(1), rtol=1e-6)
  with pytest.raises(ValueError, match="k <= n"):
    synthetic.masked_summation(2, 3, 4, 5, seed=0)


def _source(n=37, length=5):
  rng = np.random.default_rng(0)
  return data.ArraySource({"input_ids": rng.integers(1, 9, (n, length)),
                           "mask": np.ones((n, length), bool), "label": np.arange(n) % 2})


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 30), st.integers(1, 12))
def test_iterator_restore_continues_the_uninterrupted_order(k, batch_size):
  source = _source()
  straight = data.train_iterator(source, batch_size, seed=7)
  reference = [next(straight)["example_id"] for _ in range(k + 8)]
  it = data.train_iterator(source, batch_size, seed=7)
  for _ in range(k):
    next(it)
  state = it.get_state()
  fresh = data.train_iterator(source, batch_size, seed=7)
  fresh.set_state(state)
  resumed = [next(fresh)["example_id"] for _ in range(8)]
  for a, b in zip(reference[k:], resumed):
    np.testing.assert_array_equal(a, b)


def test_epochs_cover_every_example_and_reshuffle():
  source = _source(n=12)
  it = data.train_iterator(source, 4, seed=0)
  epoch1 = np.concatenate([next(it)["example_id"] for _ in range(3)])
  epoch2 = np.concatenate([next(it)["example_id"] for _ in range(3)])
  assert sorted(epoch1) == sorted(epoch2) == list(range(12))
  assert not np.array_equal(epoch1, epoch2)


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_eval_batches_cover_each_example_once_with_filler(processes):
  source = _source(n=23)
  seen = []
  counts = set()
  for p in range(processes):
    batches = list(data.eval_batches(source, 6, p, processes))
    counts.add(len(batches))
    for b in batches:
      assert b["mask"].shape[0] == 6 // processes
      real = b["mask"].any(-1)
      seen.extend(b["example_id"][real].tolist())
      assert not b["mask"][~real].any()
  assert len(counts) == 1  # Every process runs the same number of eval steps.
  assert sorted(seen) == list(range(23))


def test_collate_pads_to_multiple_and_masks_pads():
  exs = [{"input_ids": np.arange(1, n + 1), "mask": np.ones(n, bool), "label": np.array(1)}
         for n in (3, 7)]
  b = pipeline.collate(exs, pad_multiple=4)
  assert b["input_ids"].shape == (2, 8)
  np.testing.assert_array_equal(b["mask"].sum(1), [3, 7])
  np.testing.assert_array_equal(b["input_ids"][~b["mask"]], 0)


def test_empty_split_is_an_error():
  with pytest.raises(ValueError, match="empty split"):
    data.ArraySource({"mask": np.zeros((0, 3), bool)})
