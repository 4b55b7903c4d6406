"""Grain pipelines over variable-length examples: bucketing and padding to the window
multiple, per-process shares, exact resume mid-epoch (also with 2 worker processes)."""
import json
import types

from hypothesis import example, given
from hypothesis import strategies as st
import numpy as np
import pytest

from longtext_jax import data
from longtext_jax import inference
from longtext_jax.data import mlm, pipeline, text


def _varlen_source(n=61, seed=0, max_len=90):
  rng = np.random.default_rng(seed)
  examples = []
  for i in range(n):
    length = int(rng.integers(3, max_len))
    examples.append({"input_ids": rng.integers(5, 50, length).astype(np.int32),
                     "mask": np.ones(length, bool), "label": np.int32(i % 3)})
  return text.ExampleSource(examples)


def _ids(it, steps):
  return [next(it)["example_id"].copy() for _ in range(steps)]


@pytest.mark.parametrize("bucket_batches,offset", [(0, 0), (4, 0), (0, 2), (4, 2)])
def test_batches_pad_to_window_multiple_and_mask_every_pad(bucket_batches, offset):
  source = _varlen_source()
  lengths = source.lengths()
  it = data.train_iterator(source, 8, seed=1, pad_multiple=16, bucket_batches=bucket_batches,
                           pad_offset=offset)
  for _ in range(20):
    b = next(it)
    L = b["input_ids"].shape[1]
    assert (L + offset) % 16 == 0 and L - 16 < lengths[b["example_id"]].max() <= L
    np.testing.assert_array_equal(b["mask"].sum(1), lengths[b["example_id"]])
    for r, i in enumerate(b["example_id"]):  # Real tokens first, then pads masked with id 0.
      np.testing.assert_array_equal(b["input_ids"][r, :lengths[i]], source[i]["input_ids"])
      assert not b["mask"][r, lengths[i]:].any() and not b["input_ids"][r, lengths[i]:].any()


@given(n=st.integers(0, 5000), multiple=st.integers(1, 300), offset=st.integers(0, 299),
       limit=st.integers(0, 6000))
def test_padded_and_bucket_lengths_are_the_shortest_of_their_form(n, multiple, offset, limit):
  """``padded_length``: the shortest ``k * m - offset`` >= n (k >= 1); inference's buckets:
  the shortest ``m * 2**j - offset`` >= n, capped at the longest such length within
  ``limit`` but never below n; an offset outside [0, m) is refused."""
  if offset >= multiple:
    with pytest.raises(ValueError, match="pad_offset"):
      pipeline.padded_length(n, multiple, offset)
    return
  p = pipeline.padded_length(n, multiple, offset)
  assert p >= max(n, 1 - offset) and (p + offset) % multiple == 0
  assert p - multiple < max(n, multiple - offset)
  b = inference.bucket_length(n, multiple, 0, offset)
  k = (b + offset) // multiple
  assert b >= n and (b + offset) % multiple == 0 and k & (k - 1) == 0
  assert k == 1 or b - (k // 2) * multiple < n  # The next smaller bucket is too short.
  capped = inference.bucket_length(n, multiple, limit, offset)
  if limit:
    fit = max((limit + offset) // multiple * multiple - offset, 1)
    assert capped == min(b, max(fit, n))
  else:
    assert capped == b


def test_bucketing_reduces_padding_and_covers_each_epoch():
  source = _varlen_source(n=64)
  lengths = source.lengths()
  pads = {}
  for bucket in (0, 8):
    it = data.train_iterator(source, 8, seed=2, bucket_batches=bucket)
    epoch = [next(it) for _ in range(8)]
    pads[bucket] = sum((~b["mask"]).sum() for b in epoch)
    if bucket:
      seen = np.concatenate([b["example_id"] for b in epoch])
      assert sorted(seen) == list(range(64))  # 64 = 8 full batches: every example once.
      nxt = np.concatenate([next(it)["example_id"] for _ in range(8)])
      assert sorted(nxt) == list(range(64)) and not np.array_equal(seen, nxt)
  assert pads[8] < 0.5 * pads[0], pads
  assert lengths.sum() > 0


@pytest.mark.parametrize("bucket_batches", [0, 3])
def test_restore_mid_epoch_continues_the_uninterrupted_order(bucket_batches):
  source = _varlen_source()
  kwargs = dict(seed=5, pad_multiple=8, bucket_batches=bucket_batches)
  reference = _ids(data.train_iterator(source, 6, **kwargs), 25)
  for k in (0, 4, 13):  # 10 batches per epoch: before, inside and after the first epoch end.
    it = data.train_iterator(source, 6, **kwargs)
    _ids(it, k)
    state = json.loads(json.dumps(it.get_state()))  # As saved in the Orbax checkpoint.
    fresh = data.train_iterator(source, 6, **kwargs)
    fresh.set_state(state)
    for a, b in zip(reference[k:k + 8], _ids(fresh, 8)):
      np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bucket_batches", [0, 2])
def test_process_shares_make_up_the_global_batch_with_one_shape(bucket_batches):
  source = _varlen_source()
  its = [data.train_iterator(source, 8, seed=3, process_index=p, process_count=2,
                             pad_multiple=4, bucket_batches=bucket_batches) for p in range(2)]
  # Variable lengths over several processes always build global batches (windows >= 1).
  single = data.train_iterator(source, 8, seed=3, pad_multiple=4,
                               bucket_batches=max(bucket_batches, 1))
  for _ in range(6):
    shares = [next(it) for it in its]
    whole = next(single)
    assert shares[0]["input_ids"].shape == shares[1]["input_ids"].shape
    np.testing.assert_array_equal(
        np.concatenate([s["example_id"] for s in shares]), whole["example_id"])


def test_consecutive_seeds_do_not_share_epoch_orders_and_old_states_resume_theirs():
  """Grain shuffles epoch e with its seed + e: passed config.seed as it was, seed 1's first
  epoch was seed 0's second (and so on), so the seeds of a study shared their data orders.
  The shuffle gets a hash of the seed; a checkpoint's 'shuffle' state (the raw seed, before 2
  Dec 2026) still resumes the order it was drawn in."""
  source = data.ArraySource({"x": np.arange(12, dtype=np.int32)[:, None],
                             "mask": np.ones((12, 1), bool)})

  def epochs(seed, n=3):
    it = data.train_iterator(source, 12, seed=seed)
    return [tuple(next(it)["x"][:, 0]) for _ in range(n)]

  orders = {s: epochs(s) for s in range(4)}
  every = [o for s in orders for o in orders[s]]
  assert len(set(every)) == len(every)  # No epoch order repeats across seeds 0-3.
  assert epochs(0) == orders[0]  # The same seed, the same orders.
  # The raw-seed order a checkpoint of before 2 Dec recorded: Grain's shuffle of the seed.
  raw = list(pipeline.grain.MapDataset.range(12).shuffle(seed=0).repeat(None)[:36])
  raw = [tuple(int(x) for x in raw[12 * e:12 * e + 12]) for e in range(3)]
  assert raw[1] == tuple(int(x) for x in pipeline.grain.MapDataset.range(12).shuffle(
      seed=1))  # Why it had to change: seed 0's epoch 1 is seed 1's epoch 0.
  old = data.train_iterator(source, 12, seed=0)
  old.set_state({"next_index": 1, "sampler": "shuffle", "bucket_batches": 0,
                 "process_count": 1})
  assert [tuple(next(old)["x"][:, 0]) for _ in range(2)] == raw[1:]
  assert old.get_state()["sampler"] == "shuffle"  # Saved again as what it is.


def test_restore_with_two_worker_processes_and_across_num_workers():
  """Workers do not change the order, and data.num_workers may change on resume
  (loop.RESUME_MAY_CHANGE): the state counts batches whatever the workers (2 -> 0 and 0 -> 2
  raised KeyError before, review s33 finding 4). A Grain state over workers, as checkpoints
  held before, still loads."""
  source = _varlen_source(n=40)
  kwargs = dict(seed=9, pad_multiple=8)
  reference = _ids(data.train_iterator(source, 4, **kwargs), 19)
  it = data.train_iterator(source, 4, num_workers=2, **kwargs)
  first = []
  for k in range(7):  # Grain's state over workers is the one set_state rebuilds.
    assert it._it.get_state() == pipeline._grain_state(k, 2)  # pylint: disable=protected-access
    first.append(next(it)["example_id"].copy())
  for a, b in zip(reference[:7], first):
    np.testing.assert_array_equal(a, b)
  state = json.loads(json.dumps(it.get_state()))  # As saved in the Orbax checkpoint.
  native = json.loads(json.dumps(it._it.get_state()))  # pylint: disable=protected-access
  it.close()
  # A state without a sampler was written before 2 Dec 2026, by the raw-seed shuffle: it
  # continues that order (here the position of `native`, in the raw-seed order).
  legacy = data.train_iterator(source, 4, **kwargs)
  legacy.set_state({"next_index": 0, "sampler": "shuffle", "bucket_batches": 0})
  legacy_reference = _ids(legacy, 11)
  for saved, expected in ((state, reference), (native, legacy_reference)):
    zero = data.train_iterator(source, 4, **kwargs)
    zero.set_state(saved)
    for a, b in zip(expected[7:11], _ids(zero, 4)):
      np.testing.assert_array_equal(a, b)
  zero = data.train_iterator(source, 4, **kwargs)
  zero.set_state(state)
  _ids(zero, 4)  # At batch 11 of the current order.
  fresh = data.train_iterator(source, 4, num_workers=2, **kwargs)
  fresh.set_state(json.loads(json.dumps(zero.get_state())))
  for a, b in zip(reference[11:19], _ids(fresh, 8)):
    np.testing.assert_array_equal(a, b)
  fresh.close()


def _global_ids(its, steps):
  """Example ids of the next ``steps`` global batches (the processes' shares in order)."""
  return [np.concatenate([next(it)["example_id"] for it in its]) for _ in range(steps)]


def _iterators(source, processes, **kwargs):
  return [data.train_iterator(source, 8, process_index=p, process_count=processes, **kwargs)
          for p in range(processes)]


@pytest.mark.parametrize("before,after", [(1, 2), (2, 1)])
def test_text_resume_under_another_process_count_without_bucketing_is_refused(before, after):
  """bucket_batches=0 shuffles a variable-length source example by example on 1 process and
  cuts it into global batches on several: the saved position would continue another order
  (review s33, finding 2: 10 of 37 examples seen twice, 10 never), so it is refused."""
  source = _varlen_source(n=37)
  its = _iterators(source, before, seed=0)
  _global_ids(its, 2)
  state = json.loads(json.dumps(its[0].get_state()))  # As saved in the Orbax checkpoint.
  for it in _iterators(source, after, seed=0):
    with pytest.raises(ValueError, match=rf"written by {before} process.*Resume with "
                       rf"{before} process.*data.bucket_batches >= 1"):
      it.set_state(state)
  # The same process count, or a state from before samplers were recorded, still resumes.
  for saved in (state, {"next_index": state["next_index"]}):
    again = _iterators(source, before, seed=0)
    for it in again:
      it.set_state(saved)
    reference = _iterators(source, before, seed=0)
    for it in reference:  # A state without a sampler resumes the order of its time, from 0.
      it.set_state({"next_index": 0} if "sampler" not in saved else dict(saved, next_index=0))
    straight = _global_ids(reference, 4)[2:]
    for a, b in zip(straight, _global_ids(again, 2)):
      np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fixed", [True, False])
def test_resume_under_another_process_count_continues_the_global_batches(fixed):
  """Fixed-length shuffles and bucketed text batches are the same for every process count:
  their state moves between counts (1 -> 2 -> 4) and continues the uninterrupted batches."""
  if fixed:
    source, kwargs = data.ArraySource({"input_ids": np.ones((37, 5), np.int32),
                                       "mask": np.ones((37, 5), bool)}), {"seed": 0}
  else:
    source, kwargs = _varlen_source(n=37), {"seed": 0, "bucket_batches": 2}
  straight = _global_ids(_iterators(source, 1, **kwargs), 6)
  got, state = [], None
  for processes in (1, 2, 4):
    its = _iterators(source, processes, **kwargs)
    for it in its:
      if state is not None:
        it.set_state(state)
    got += _global_ids(its, 2)
    state = json.loads(json.dumps(its[0].get_state()))
  for a, b in zip(straight, got):
    np.testing.assert_array_equal(np.sort(a), np.sort(b))


def test_grain_states_over_workers_round_trip():
  for workers in range(5):
    for position in range(13):
      state = pipeline._grain_state(position, workers)  # pylint: disable=protected-access
      assert pipeline._grain_position(state) == position  # pylint: disable=protected-access
  bad = pipeline._grain_state(5, 2)  # pylint: disable=protected-access
  bad["next_index_in_cycle"] = 0  # Counts 3 + 2 but the cycle at worker 0: not consistent.
  with pytest.raises(ValueError, match="cannot read"):
    pipeline._grain_position(bad)  # pylint: disable=protected-access
  it = data.train_iterator(_varlen_source(n=12), 4, seed=0)
  with pytest.raises(ValueError, match="cannot read the data iterator state"):
    it.set_state({"position": 3})



def test_an_unknown_grain_state_is_kept_for_the_same_num_workers(monkeypatch):
  """A Grain version whose state this library cannot read is saved as it is, with its
  data.num_workers: it resumes under the same workers and names the field otherwise."""
  source = _varlen_source(n=12)
  it = data.train_iterator(source, 4, seed=0)
  reference = _ids(data.train_iterator(source, 4, seed=0), 5)
  _ids(it, 2)

  def unreadable(state):
    raise ValueError(f"unreadable: {state}")

  with monkeypatch.context() as m:
    m.setattr(pipeline, "_grain_position", unreadable)
    state = json.loads(json.dumps(it.get_state()))
  assert state["grain_state"] == {"next_index": 2} and state["num_workers"] == 0
  fresh = data.train_iterator(source, 4, seed=0)
  fresh.set_state(state)
  for a, b in zip(reference[2:], _ids(fresh, 3)):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match="data.num_workers=0; resume with that"):
    data.train_iterator(source, 4, seed=0, num_workers=2).set_state(state)

class _Tokenizer:
  mask_id, vocab_size, special_ids = 4, 50, (0, 1, 2, 3, 4)


def test_bucketed_masked_lm_masks_each_epoch_anew_and_resumes_exactly():
  """Length bucketing over MaskedLMSource read copy 0 of every row in every epoch, losing
  dynamic masking (review s33, aside 5); epoch e now reads copy e % copies."""
  rows = {"input_ids": np.random.default_rng(0).integers(5, 50, (12, 32)).astype(np.int32),
          "mask": np.ones((12, 32), bool)}
  source = mlm.MaskedLMSource(rows, _Tokenizer(), seed=0, copies=5)
  kwargs = dict(seed=3, bucket_batches=2)

  def batches(it, steps):
    return [{k: next_[k].copy() for k in ("example_id", "input_ids", "mlm_mask")}
            for next_ in (next(it) for _ in range(steps))]

  straight = batches(data.train_iterator(source, 4, **kwargs), 9)  # 3 epochs of 3 batches.
  maskings = {}
  for step, b in enumerate(straight):
    for row, ids in zip(b["example_id"], b["input_ids"]):
      np.testing.assert_array_equal(ids, source[(step // 3) * 12 + row]["input_ids"])
      maskings.setdefault(int(row), set()).add(ids.tobytes())
  assert sorted(maskings) == list(range(12))
  assert all(len(m) == 3 for m in maskings.values())  # A new masking in each epoch.
  it = data.train_iterator(source, 4, **kwargs)
  batches(it, 4)
  fresh = data.train_iterator(source, 4, **kwargs)
  fresh.set_state(json.loads(json.dumps(it.get_state())))
  for a, b in zip(straight[4:], batches(fresh, 5)):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])


def test_a_refused_data_state_names_the_checkpoint(tmp_path):
  """restore_or_init names the checkpoint whose data state the iterator refuses."""
  from longtext_jax.train import loop  # pylint: disable=import-outside-toplevel

  class Checkpointer:
    def check_best(self):
      pass

    def restore_latest(self, abstract, start_fresh):
      del abstract, start_fresh
      return types.SimpleNamespace(step=7, state="state", damaged=(),
                                   data_state={"next_index": 2, "sampler": "shuffle",
                                               "bucket_batches": 0, "process_count": 1})

  run = types.SimpleNamespace(workdir=str(tmp_path), config=types.SimpleNamespace(
      train=types.SimpleNamespace(start_fresh_if_all_damaged=False)))
  spec = types.SimpleNamespace(abstract=None)
  it = data.train_iterator(_varlen_source(n=37), 8, seed=0, process_index=0, process_count=2)
  with pytest.raises(ValueError, match=rf"{tmp_path}/checkpoints/7/data: .*written by 1 "):
    loop.restore_or_init(run, spec, Checkpointer(), it, None)


def test_bucketing_needs_known_lengths():
  lazy = text.ExampleSource(list(range(10)), transform=lambda i: {
      "input_ids": np.ones(i + 1, np.int32), "mask": np.ones(i + 1, bool)}, eager=False)
  with pytest.raises(ValueError, match="in-memory source"):
    data.train_iterator(lazy, 2, seed=0, bucket_batches=2)
  assert next(data.train_iterator(lazy, 2, seed=0))["mask"].shape[0] == 2


def test_bucketing_stacked_arrays_keeps_their_width():
  source = data.ArraySource({"input_ids": np.ones((10, 6), np.int32),
                             "mask": np.arange(6)[None, :] < np.arange(1, 11)[:, None] % 6 + 1})
  b = next(data.train_iterator(source, 4, seed=0, bucket_batches=2, pad_multiple=4))
  assert b["input_ids"].shape == (4, 8)


def test_collate_to_a_given_length():
  exs = [{"input_ids": np.arange(1, 4), "mask": np.ones(3, bool)}]
  assert pipeline.collate(exs, 4, length=9)["input_ids"].shape == (1, 12)
  with pytest.raises(ValueError, match="shorter than an example"):
    pipeline.collate(exs, 1, length=2)


@pytest.mark.long  # test_restore_with_two_worker_processes checks the same restore, fast.
def test_trainer_resumes_a_text_loader_exactly_with_two_workers(tmp_path):
  """6 steps straight (in-process loading) == 3 steps + resume to 6 (2 Grain workers, length
  bucketing, a local JSONL file): bitwise-equal parameters."""
  import jax  # pylint: disable=import-outside-toplevel
  from conftest import load_config  # pylint: disable=import-outside-toplevel
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  from test_train import restore_params  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  path = tmp_path / "train.jsonl"
  with open(path, "w") as f:
    for i in range(40):
      label = ["neg", "pos"][i % 2]
      f.write(json.dumps({"text": f"{label} " * int(rng.integers(1, 12)), "label": label})
              + "\n")

  def config(steps, workers):
    c = load_config("text_classification.py", "local,tiny")
    c.data.train_path = c.data.eval_path = str(path)
    c.data.num_workers = workers
    c.data.batch_size = 4
    c.data.pad_multiple = 64  # One shape: one compilation per run.
    c.model.d_model = 16
    c.model.encoder.num_heads = 2
    c.optim.schedule = "constant"  # The schedule then does not depend on num_steps.
    c.optim.warmup_steps = 0
    c.train.num_steps = steps
    c.train.eval_every = c.train.checkpoint_every = 3
    c.train.best_metric = ""
    c.train.progress_bar = False
    c.train.async_checkpoint = False
    return c

  train.train_and_evaluate(config(6, 0), str(tmp_path / "straight"))
  train.train_and_evaluate(config(3, 2), str(tmp_path / "resumed"))
  train.train_and_evaluate(config(6, 2), str(tmp_path / "resumed"))
  step_a, a = restore_params(tmp_path / "straight")
  step_b, b = restore_params(tmp_path / "resumed")
  assert step_a == step_b == 6
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)


def _eval_batches_before_global_padding(source, global_batch_size, process_index=0,
                                        process_count=1, pad_multiple=1, pad_offset=0):
  """``pipeline.eval_batches`` as it was before it padded to the global batch's longest
  example (each process padded to its own): the single-process reference."""
  local = global_batch_size // process_count
  indices = np.arange(process_index, len(source), process_count)
  num_batches = -(-len(source) // (local * process_count))
  for b in range(num_batches):
    idx = indices[b * local:(b + 1) * local]
    if len(idx):
      batch = pipeline.collate([source[int(i)] for i in idx], pad_multiple,
                               pad_offset=pad_offset)
    else:
      batch = pipeline.filler_like(pipeline.collate([source[0]], pad_multiple,
                                                    pad_offset=pad_offset), 0)
    if len(idx) < local:
      filler = pipeline.filler_like(batch if len(idx) else pipeline.collate(
          [source[0]], pad_multiple, pad_offset=pad_offset), local - len(idx))
      batch = {k: np.concatenate([batch[k], filler[k]]) for k in batch}
    yield batch


@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=30),
       processes=st.integers(1, 4), local=st.integers(1, 5), extra=st.integers(0, 3),
       pad=st.sampled_from([(1, 0), (4, 0), (8, 2)]), lazy=st.booleans())
# The last global batch (examples 3, 4) has no row for process 2, whose filler must take
# that batch's length, not that of example 0.
@example(lengths=[30, 1, 1, 2, 3], processes=3, local=1, extra=0, pad=(1, 0), lazy=True)
def test_eval_batches_have_one_shape_per_global_batch_on_every_process(
    lengths, processes, local, extra, pad, lazy):
  """Variable-length examples over 1-4 processes: (a) every process's batch b has one shape,
  the global batch's longest example rounded as ``collate`` does; (b) the real (mask-any)
  rows of all processes hold every example once, tokens unchanged, pads masked and zero;
  (c) one process yields what it always did; (d) process p's batch b is rows p::P of the
  single-process batch b of the same global size (filler rows included)."""
  rng = np.random.default_rng(len(lengths))
  examples = [{"input_ids": rng.integers(5, 50, n).astype(np.int32),
               "mask": np.ones(n, bool), "label": np.int32(i % 3)}
              for i, n in enumerate(lengths)]
  if lazy:  # Lengths not known up front: read on access (a TFDS split without max_examples).
    source = text.ExampleSource(list(range(len(examples))), transform=lambda i: examples[i],
                                eager=False)
  else:
    source = text.ExampleSource(examples)
  multiple, offset = pad
  batch_size = local * processes + min(extra, processes - 1)  # Not always divisible.
  kwargs = dict(pad_multiple=multiple, pad_offset=offset)
  per_process = [list(data.eval_batches(source, batch_size, p, processes, **kwargs))
                 for p in range(processes)]
  whole = local * processes
  assert {len(batches) for batches in per_process} == {-(-len(lengths) // whole)}
  single = list(data.eval_batches(source, whole, **kwargs))
  seen = []
  for b, shares in enumerate(zip(*per_process)):
    longest = max(lengths[b * whole:(b + 1) * whole])
    for key in shares[0]:  # (a)
      assert len({s[key].shape for s in shares}) == 1, (b, key, [s[key].shape for s in shares])
    assert shares[0]["input_ids"].shape == (local, pipeline.padded_length(longest, *pad))
    for p, share in enumerate(shares):
      for key in share:  # (d)
        np.testing.assert_array_equal(share[key], single[b][key][p::processes])
      for r in np.flatnonzero(share["mask"].any(-1)):  # (b)
        i = int(share["example_id"][r])
        n = lengths[i]
        seen.append(i)
        np.testing.assert_array_equal(share["input_ids"][r, :n], examples[i]["input_ids"])
        assert share["mask"][r, :n].all() and not share["mask"][r, n:].any()
        assert not share["input_ids"][r, n:].any() and share["label"][r] == i % 3
      filler = ~share["mask"].any(-1)
      assert not any(share[k][filler].any() for k in share)  # Filler rows: all zeros.
  assert sorted(seen) == list(range(len(lengths)))
  for size in (batch_size, whole):  # (c)
    new = list(data.eval_batches(source, size, **kwargs))
    old = list(_eval_batches_before_global_padding(source, size, **kwargs))
    assert len(new) == len(old)
    for a, c in zip(new, old):
      assert a.keys() == c.keys()
      for key in a:
        assert a[key].dtype == c[key].dtype
        np.testing.assert_array_equal(a[key], c[key])
