"""MLM masking rates and invariants; the dynamically masked pretraining sources."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from longtext_jax import config as config_lib
from longtext_jax import data as data_lib
from longtext_jax import tasks
from longtext_jax.data import mlm
from longtext_jax.data.masking import mask_batch, mask_example
from longtext_jax.data.pipeline import train_iterator

SPECIAL = (0, 1, 2, 3, 4)
KW = dict(mask_id=4, vocab_size=1000, special_ids=SPECIAL)


def _rows(batch, length, seed=0):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(length // 2, length + 1, size=batch)
  mask = np.arange(length)[None] < lengths[:, None]
  ids = rng.integers(5, 1000, size=(batch, length))
  ids[:, 0] = 2
  ids[np.arange(batch), lengths - 1] = 3
  ids = np.where(mask, ids, 0)
  return ids, mask


def _check_invariants(ids, mask, out, word_starts=None):
  sel = out["mlm_mask"]
  special = np.isin(ids, SPECIAL)
  assert not (sel & ~mask).any() and not (sel & special).any()
  np.testing.assert_array_equal(out["mlm_targets"], ids)
  # Only selected positions may change; replacements are never special (except <mask>).
  changed = out["input_ids"] != ids
  assert not (changed & ~sel).any()
  assert not np.isin(out["input_ids"][changed], (0, 1, 2, 3)).any()
  if word_starts is not None:  # whole words only
    for b in range(len(ids)):
      start = None
      for i in range(ids.shape[1]):
        if special[b, i] or not mask[b, i]:
          start = None  # the next real token starts a word
        elif word_starts[b, i] or start is None:
          start = i
        else:
          assert sel[b, i] == sel[b, start]


def test_rates_80_10_10_and_invariants():
  ids, mask = _rows(400, 128)
  out = mask_batch(ids, mask, seed=0, **KW)
  _check_invariants(ids, mask, out)
  candidates = mask & ~np.isin(ids, SPECIAL)
  sel = out["mlm_mask"]
  assert abs(sel.sum() / candidates.sum() - 0.15) < 0.005
  # Per row the count is floor(0.15 n + u): within one of 0.15 n.
  assert np.all(np.abs(sel.sum(1) - 0.15 * candidates.sum(1)) < 1)
  new = out["input_ids"][sel]
  old = ids[sel]
  frac_mask = np.mean(new == 4)
  frac_keep = np.mean(new == old)
  frac_random = np.mean((new != 4) & (new != old))
  assert abs(frac_mask - 0.8) < 0.02
  assert abs(frac_keep - 0.1) < 0.015  # includes the rare random draw equal to the original
  assert abs(frac_random - 0.1) < 0.015
  # Deterministic from the seed; another seed masks differently.
  again = mask_batch(ids, mask, seed=0, **KW)
  for k in out:
    np.testing.assert_array_equal(out[k], again[k])
  assert (mask_batch(ids, mask, seed=1, **KW)["mlm_mask"] != sel).any()


def test_whole_word_masking():
  ids, mask = _rows(300, 96, seed=1)
  rng = np.random.default_rng(5)
  word_starts = rng.random(ids.shape) < 0.4
  out = mask_batch(ids, mask, seed=3, word_starts_BL=word_starts, **KW)
  _check_invariants(ids, mask, out, word_starts)
  candidates = mask & ~np.isin(ids, SPECIAL)
  rate = out["mlm_mask"].sum() / candidates.sum()
  assert 0.12 < rate <= 0.155, rate


@settings(max_examples=40, deadline=None)
@given(length=st.integers(1, 40), real=st.integers(0, 40), seed=st.integers(0, 2**31 - 1),
       prob=st.floats(0.0, 1.0), wwm=st.booleans())
def test_invariants_property(length, real, seed, prob, wwm):
  rng = np.random.default_rng(seed)
  mask = np.arange(length) < min(real, length)
  ids = np.where(mask, rng.integers(0, 30, size=length), 0)  # specials appear often
  starts = rng.random(length) < 0.5 if wwm else None
  out = mask_example(ids, mask, np.random.default_rng(seed), mask_id=4, vocab_size=30,
                     special_ids=SPECIAL, mask_prob=prob, word_starts_L=starts)
  _check_invariants(ids[None], mask[None], {k: v[None] for k, v in out.items()},
                    None if starts is None else starts[None])
  n = (mask & ~np.isin(ids, SPECIAL)).sum()
  assert out["mlm_mask"].sum() <= np.floor(prob * n) + 1


def test_errors():
  ids, mask = _rows(1, 8)
  with pytest.raises(ValueError, match="mask_prob"):
    mask_example(ids[0], mask[0], np.random.default_rng(0), mask_prob=1.5, **KW)
  with pytest.raises(ValueError, match="replace_probs"):
    mask_example(ids[0], mask[0], np.random.default_rng(0), replace_probs=(0.5, 0.5, 0.5),
                 **KW)


def _pydoc_config(tmp_path, seq_len=32):
  c = config_lib.base_config()
  c.task.name = "mlm"
  c.model.vocab_size = c.task.vocab_size = 512
  c.data.name = "pydoc_mlm"
  c.data.seq_len = seq_len
  c.data.tokenizer.kind = "sentencepiece"
  c.data.tokenizer.path = str(tmp_path / "spm" / "pydoc.model")
  c.data.tokenizer_vocab_size = 512
  return c


def test_pydoc_source_masks_dynamically(tmp_path):
  c = _pydoc_config(tmp_path)
  splits = data_lib.build_splits(c, tasks.get_task(c.task))
  assert (tmp_path / "spm" / "pydoc.model").exists()
  train, evaluation = splits["train"], splits["eval"]
  assert isinstance(train, mlm.MaskedLMSource) and len(train) == 1000 * train.num_rows
  row = train.num_rows // 2
  first, second = train[row], train[row + train.num_rows]  # the same row in two epochs
  np.testing.assert_array_equal(first["mlm_targets"], second["mlm_targets"])
  assert (first["mlm_mask"] != second["mlm_mask"]).any()
  np.testing.assert_array_equal(train[row]["input_ids"], first["input_ids"])  # deterministic
  ids = first["mlm_targets"]
  assert ids[0] == 2 and ids[first["mask"]][-1] == 3
  # Eval is masked once: a plain array source.
  assert evaluation.arrays["mlm_mask"].any() and len(evaluation) < train.num_rows
  batch = next(train_iterator(train, 8, seed=0))
  assert set(batch) >= {"input_ids", "mask", "mlm_targets", "mlm_mask"}
  assert batch["input_ids"].shape == (8, 32) and batch["mlm_mask"].any()
  # A model vocabulary smaller than the tokenizer's is refused.
  c.model.vocab_size = c.task.vocab_size = 100
  with pytest.raises(ValueError, match="vocab_size"):
    data_lib.build_splits(c, tasks.get_task(c.task))


def test_listops_mlm_reads_the_classification_training_expressions():
  """Self-pretraining (configs/listops.py:<model>,mlm): the train split is the listops
  source's own training expressions (the same seed), labels dropped, each copy masked anew
  and deterministically; unselected tokens are the expression's; the eval split is the dev
  expressions masked once; length-bucketed batches read copy e % copies in epoch e and carry
  the targets."""
  from conftest import load_config  # pylint: disable=g-import-not-at-top
  c = load_config("listops.py", "ran,tiny,mlm")
  cls = load_config("listops.py", "ran,tiny")
  task = tasks.get_task(c.task)
  splits = data_lib.build_splits(c, task)
  plain = data_lib.build_splits(cls, tasks.get_task(cls.task))
  train, evaluation = splits["train"], splits["eval"]
  n = train.num_rows
  assert n == c.data.num_train and len(train) == c.data.mask_copies * n
  assert len(evaluation) == c.data.num_eval
  np.testing.assert_array_equal(train.lengths(),
                                [len(plain["train"][i]["mask"]) for i in range(n)])
  selected = real = 0
  for i in range(n):
    ex, original = train[i], plain["train"][i]
    assert "label" not in ex and ex["example_id"] == i
    np.testing.assert_array_equal(ex["mlm_targets"], original["input_ids"])
    np.testing.assert_array_equal(ex["input_ids"][~ex["mlm_mask"]],
                                  original["input_ids"][~ex["mlm_mask"]])
    assert not (ex["mlm_mask"] & ~ex["mask"]).any()
    selected, real = selected + ex["mlm_mask"].sum(), real + ex["mask"].sum()
  assert 0.10 < selected / real < 0.20  # mask_prob 0.15
  again = train[3]
  np.testing.assert_array_equal(again["input_ids"], train[3]["input_ids"])  # deterministic
  other_copies = [train[3 + k * n]["mlm_mask"] for k in range(1, 6)]
  assert any((m != again["mlm_mask"]).any() for m in other_copies)
  for i in range(len(evaluation)):
    np.testing.assert_array_equal(evaluation[i]["mlm_targets"],
                                  plain["eval"][i]["input_ids"])
  iterator = train_iterator(train, 8, seed=0, pad_multiple=c.data.pad_multiple,
                            bucket_batches=c.data.bucket_batches)
  batch = next(iterator)
  assert batch["input_ids"].shape[1] % c.data.pad_multiple == 0
  assert batch["mlm_mask"].any() and not (batch["mlm_mask"] & ~batch["mask"]).any()
  # A target beyond the model's vocabulary is refused before training.
  bad = load_config("listops.py", "ran,tiny,mlm")
  bad.unlock()
  bad.task.vocab_size = bad.model.vocab_size = 10
  with pytest.raises(ValueError, match=r"train split: example \d+: mlm_target=\d+ is outside"):
    data_lib.build_splits(bad, tasks.get_task(bad.task))
  # Whole-word masking has no words to group here: refused rather than silently ignored.
  words = load_config("listops.py", "ran,tiny,mlm")
  words.data.whole_word_mask = True
  with pytest.raises(ValueError, match=r"'listops_mlm': config.data.whole_word_mask=True"):
    data_lib.build_splits(words, tasks.get_task(words.task))
