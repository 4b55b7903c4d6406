"""Synthetic long-range tasks: ListOps labels against a direct evaluator, needle evidence,
copy/associative recall answers, and each task's config running on the trainer."""
import collections
import os

import jax
import numpy as np
import pytest

from conftest import load_config
from longtext_jax import train
from longtext_jax.data import synthetic

ID_TO_TOKEN = {i: t for t, i in synthetic.LISTOPS_IDS.items()}


def evaluate_listops(ids):
  """Direct stack evaluation of a token sequence (written from the task's definition)."""
  stack = [[]]
  ops = []
  depth = max_depth = 0
  for i in ids:
    tok = ID_TO_TOKEN[int(i)]
    if tok.startswith("["):
      ops.append(tok)
      stack.append([])
      depth += 1
      max_depth = max(max_depth, depth)
    elif tok == "]":
      args, op = stack.pop(), ops.pop()
      assert len(args) >= 2
      if op == "[MAX":
        v = max(args)
      elif op == "[MIN":
        v = min(args)
      elif op == "[MED":
        s = sorted(args)
        mid = len(s) // 2
        v = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) // 2
      else:
        v = sum(args) % 10
      stack[-1].append(v)
      depth -= 1
    else:
      stack[-1].append(int(tok))
  assert len(stack) == 1 and len(stack[0]) == 1 and not ops
  return stack[0][0], max_depth


@pytest.mark.parametrize("min_len,max_len,max_depth", [(8, 64, 3), (200, 400, 10)])
def test_listops_labels_equal_direct_evaluation(min_len, max_len, max_depth):
  examples = synthetic.listops(60, seed=1, min_len=min_len, max_len=max_len,
                               max_depth=max_depth, max_args=10)
  ops = collections.Counter()
  for ex in examples:
    value, depth = evaluate_listops(ex["input_ids"])
    assert int(ex["label"]) == value
    assert 1 <= depth <= max_depth
    assert min_len <= len(ex["input_ids"]) <= max_len
    assert ex["mask"].all()
    ops.update(ID_TO_TOKEN[int(i)] for i in ex["input_ids"] if ID_TO_TOKEN[int(i)][0] == "[")
  assert set(ops) == set(synthetic.LISTOPS_OPS)
  assert len({int(ex["label"]) for ex in examples}) >= 5
  again = synthetic.listops(60, seed=1, min_len=min_len, max_len=max_len, max_depth=max_depth)
  assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(examples, again))


def test_listops_reaches_lra_lengths_and_depth():
  examples = synthetic.listops(4, seed=0, min_len=1500, max_len=2000)
  depths = [evaluate_listops(ex["input_ids"])[1] for ex in examples]
  assert all(1500 <= len(ex["input_ids"]) <= 2000 for ex in examples)
  assert max(depths) <= 10


def test_listops_train_min_len_mixes_short_expressions_into_training_only():
  """config.data.listops_train_min_len: the training split draws lengths from it up (short
  expressions mixed in, labels still the expressions' values); the dev split, and so a
  study's test split, is the one without it; out of range it is refused by name."""
  from longtext_jax import data, tasks  # pylint: disable=g-import-not-at-top
  plain = load_config("listops.py", "ran,tiny")
  plain.data.min_len, plain.data.num_train = 40, 200
  mixed = load_config("listops.py", "ran,tiny")
  mixed.data.min_len, mixed.data.num_train = 40, 200
  mixed.data.listops_train_min_len = 8
  task = tasks.get_task(plain.task)
  a, b = data.build_splits(plain, task), data.build_splits(mixed, task)
  for i in range(len(a["eval"])):
    np.testing.assert_array_equal(a["eval"][i]["input_ids"], b["eval"][i]["input_ids"])
  lengths = lambda split: [len(split[i]["input_ids"]) for i in range(len(split))]
  assert min(lengths(a["train"])) >= 40 and min(lengths(a["eval"])) >= 40
  short = [n for n in lengths(b["train"]) if n < 40]
  assert min(lengths(b["train"])) >= 8 and len(short) > 20  # about 32 / 57 of them
  assert max(lengths(b["train"])) <= mixed.data.seq_len
  for i in range(len(b["train"])):
    ex = b["train"][i]
    assert evaluate_listops(ex["input_ids"])[0] == int(ex["label"])
  mixed.data.listops_train_min_len = mixed.data.seq_len + 1
  with pytest.raises(ValueError, match="listops_train_min_len"):
    data.build_splits(mixed, task)


def read_needle(ids):
  """The label as written by the needle: the symbol right after the only marker."""
  where = np.flatnonzero(ids == synthetic.NEEDLE_MARKER)
  assert len(where) == 1
  return int(ids[where[0] + 1]) - synthetic.NEEDLE_MARKER - 1, int(where[0])


def test_needle_label_is_recoverable_only_from_the_needle():
  classes = 4
  examples = synthetic.needle(400, seed=3, min_len=600, max_len=900, num_classes=classes,
                              min_pos=512)
  rng = np.random.default_rng(0)
  shortcut_hits = 0
  for ex in examples:
    ids, label = ex["input_ids"], int(ex["label"])
    got, pos = read_needle(ids)
    assert got == label and pos >= 512  # The evidence lies beyond token 512.
    # Permuting every token except the needle keeps the label ...
    rest = np.setdiff1d(np.arange(len(ids)), [pos, pos + 1])
    shuffled = ids.copy()
    shuffled[rest] = ids[rng.permutation(rest)]
    assert read_needle(shuffled)[0] == label
    # ... changing the needle's class symbol changes it ...
    changed = ids.copy()
    changed[pos + 1] = synthetic.needle_class_id((label + 1) % classes)
    assert read_needle(changed)[0] != label
    # ... and the filler carries no signal: its most frequent class symbol is a chance guess.
    counts = np.bincount(ids[rest] - synthetic.NEEDLE_MARKER - 1, minlength=64)[:classes]
    shortcut_hits += int(np.argmax(counts) == label)
  assert shortcut_hits / len(examples) < 1 / classes + 0.08
  positions = [read_needle(ex["input_ids"])[1] for ex in examples]
  assert max(positions) > 800  # Anywhere, up to the end.


def test_recall_answers():
  for ex in synthetic.recall(50, seed=0, kind="copy", seq_len=22, num_symbols=8):
    ids, target = ex["input_ids"], ex["target_mask"]
    m = 10
    np.testing.assert_array_equal(ids[1:m + 1], ids[m + 2:])
    assert ids[0] == 2 and ids[m + 1] == 3 and target.sum() == m and target[m + 2:].all()
  for ex in synthetic.recall(50, seed=0, kind="associative", seq_len=22, num_symbols=8):
    ids, target = ex["input_ids"], ex["target_mask"]
    pairs = ids[1:-3].reshape(-1, 2)
    assert len(set(pairs[:, 0].tolist())) == len(pairs)  # Distinct keys.
    query, answer = ids[-2], ids[-1]
    assert answer == pairs[pairs[:, 0] == query][0, 1]
    assert np.flatnonzero(target).tolist() == [len(ids) - 1]


def _saved_params(workdir):
  """The parameters of the latest checkpoint in ``workdir``."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  from longtext_jax.train import checkpointing  # pylint: disable=import-outside-toplevel
  mngr = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"),
                               item_handlers=checkpointing._handlers(),  # pylint: disable=protected-access
                               options=ocp.CheckpointManagerOptions(read_only=True))
  restored = mngr.restore(mngr.latest_step(),
                          args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  return restored["state"]["params"]


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("config_arg", ["listops.py:transformer,tiny",
                                        "needle.py:transformer,tiny",
                                        "recall.py:associative,tiny"])
def test_task_configs_run_on_the_trainer(config_arg, tmp_path):
  """Each task config trains on the trainer, and its reported eval loss and accuracy equal
  those recomputed here (numpy) from the saved checkpoint over the whole eval split: the
  answer token for recall (lm), the label for listops and needle (classification)."""
  from longtext_jax import data, model, tasks  # pylint: disable=import-outside-toplevel
  path, arg = config_arg.split(":")
  config = load_config(path, arg)
  config.train.num_steps = 3
  config.train.eval_every = 3
  config.train.checkpoint_every = 3
  config.train.progress_bar = False
  config.data.num_train = 64
  config.data.num_eval = 32
  config.data.pad_multiple = config.data.seq_len  # One batch shape: one compilation.
  final = train.train_and_evaluate(config, str(tmp_path))

  source = data.build_splits(config, tasks.get_task(config.task))["eval"]
  batch = data.pipeline.collate([source[i] for i in range(len(source))],
                                config.data.pad_multiple)
  assert len(batch["mask"]) == 32
  batch = {k: v for k, v in batch.items() if k != "example_id"}
  logits = np.asarray(jax.jit(model.build_model(config).apply)(
      {"params": _saved_params(str(tmp_path))}, batch)["logits"], np.float64)
  if config.task.name == "lm":  # Logits at t predict token t + 1 where target_mask marks it.
    ids, w = batch["input_ids"], batch["mask"] & batch["target_mask"]
    rows, cols = np.nonzero(w[:, 1:])
    assert len(rows) == 32  # One answer per document.
    logits, targets = logits[rows, cols], ids[rows, cols + 1]
  else:
    targets = batch["label"]
  logp = _log_softmax(logits)
  np.testing.assert_allclose(final["loss"], -logp[np.arange(len(targets)), targets].mean(),
                             rtol=1e-4)
  assert final["accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == targets), abs=1e-9)


def test_causal_lm_target_mask_counts_only_the_answer():
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import ml_collections  # pylint: disable=import-outside-toplevel
  from longtext_jax import tasks  # pylint: disable=import-outside-toplevel
  exs = synthetic.recall(3, seed=1, kind="associative", seq_len=12, num_symbols=4)
  batch = {k: jnp.asarray(np.stack([e[k] for e in exs])) for k in exs[0]}
  vocab = synthetic.FIRST_ID + 8
  logits = jax.random.normal(jax.random.key(0), batch["input_ids"].shape + (vocab,))
  task = tasks.get_task(ml_collections.ConfigDict({"name": "lm", "vocab_size": vocab}))
  loss_sum, weight = task.loss({"logits": logits}, batch)
  # Reference: only the last token (the recalled value) is predicted, from position L-2.
  logp = jax.nn.log_softmax(logits[:, -2])
  want = -sum(float(logp[b, int(batch["input_ids"][b, -1])]) for b in range(3))
  assert float(weight) == 3
  np.testing.assert_allclose(float(loss_sum), want, rtol=1e-5)
  without = {k: v for k, v in batch.items() if k != "target_mask"}
  assert float(task.loss({"logits": logits}, without)[1]) == 3 * 11  # Every next token.


@pytest.mark.parametrize("min_len,max_len,max_depth,max_args", [(8, 64, 3, 4), (100, 500, 10, 10)])
def test_listops_tree_evaluates_to_the_label_at_every_cut(min_len, max_len, max_depth, max_args):
  """``listops_tree`` + ``listops_value`` (the analysis's readers) against the stack
  evaluator above: the whole tree is the label; cut at any level and guessed with the true
  values of the cut sub-expressions, it is still the label; cut at its depth or below, the
  guess is never asked; the depth is the stack's."""
  examples = synthetic.listops(40, seed=3, min_len=min_len, max_len=max_len,
                               max_depth=max_depth, max_args=max_args)

  def never(_):
    raise AssertionError("guess asked for a tree shallower than the cut")

  for ex in examples:
    tree = synthetic.listops_tree(ex["input_ids"])
    value, depth = evaluate_listops(ex["input_ids"])
    assert synthetic.listops_value(tree) == value == int(ex["label"])
    assert synthetic.listops_depth(tree) == depth
    for levels in range(depth + 1):
      assert synthetic.listops_value(tree, levels, guess=synthetic.listops_value) == value
    assert synthetic.listops_value(tree, depth, guess=never) == value
    assert synthetic.listops_value(tree, 0, guess=lambda t: 11) == 11


def test_listops_value_cut_levels_replace_subexpressions_by_the_guess():
  ids = [synthetic.LISTOPS_IDS[t] for t in
         "[MAX 2 [MIN 7 [SM 5 6 ] ] 1 ]".split()]
  tree = synthetic.listops_tree(ids)
  assert tree == ("[MAX", [2, ("[MIN", [7, ("[SM", [5, 6])]), 1])
  assert synthetic.listops_value(tree) == 2  # max(2, min(7, 11 % 10), 1)
  assert synthetic.listops_value(tree, 1, guess=lambda t: 5) == 5  # max(2, 5, 1)
  assert synthetic.listops_value(tree, 2, guess=lambda t: 9) == 7  # max(2, min(7, 9), 1)
  assert synthetic.listops_value(tree, 0, guess=lambda t: 4) == 4
  with pytest.raises(ValueError, match="no guess"):
    synthetic.listops_value(tree, 1)


@pytest.mark.parametrize("text,message", [
    ("[MAX 2 3", r"end of input \(token 3\): \[MAX opened at token 0 is not closed"),
    ("[MAX 2 3 ] ]", r"token 4: '\]' after the complete expression"),
    ("]", r"token 0: '\]' closes no operator"),
    ("[MIN 4 ]", r"token 2: \[MIN opened at token 0 has 1 argument"),
    ("[SM 1 2 ] 5", r"token 4: '5' after the complete expression"),
    ("", "empty ListOps expression"),
])
def test_listops_tree_names_the_token_of_a_malformed_expression(text, message):
  ids = [synthetic.LISTOPS_IDS[t] for t in text.split()]
  with pytest.raises(ValueError, match=message):
    synthetic.listops_tree(ids)


def test_listops_tree_rejects_an_id_outside_the_symbols():
  ids = [synthetic.LISTOPS_IDS["[MAX"], 0, synthetic.LISTOPS_IDS["3"]]
  with pytest.raises(ValueError, match=r"token 1: id 0 is not a ListOps symbol \(5..19\)"):
    synthetic.listops_tree(ids)
