"""ChunkBERT, TextCNN and the BERT baselines: equal code paths, slow references, invariances."""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from conftest import load_config, load_script
import hf_folders
import own_corpus_data
from longtext_jax import model as model_lib
from longtext_jax.config import base_config
from longtext_jax.encoders import bert as bert_lib
from longtext_jax.encoders import bert_checkpoint as ckpt_lib
from longtext_jax.encoders.bert_baselines import BertFirst, BertRandom, ToBert
from longtext_jax.data import pipeline
from longtext_jax.encoders import chunk_bert
from longtext_jax.encoders.chunk_bert import ChunkBert
from longtext_jax.layers.textcnn import TextCNN

CLS, SEP = 101, 102
TINY = dict(vocab_size=128, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
            max_position_embeddings=64)
LAST = 3  # Hidden states averaged in these tests (the paper's 5 needs >= 4 layers).


def _jit_apply(module, **static):
  """module.apply under jit (eager dispatch of many tiny ops is slow on a busy CPU)."""
  return jax.jit(lambda v, *a: module.apply(v, *a, **static))


def _docs(lengths, total, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, 100, size=(len(lengths), total)).astype(np.int32)
  mask = np.arange(total)[None] < np.asarray(lengths)[:, None]
  return np.where(mask, ids, 0).astype(np.int32), mask


def _bert_of(enc) -> bert_lib.Bert:
  return bert_lib.Bert(**{f: getattr(enc, f) for f in bert_lib.bert_fields()
                          if hasattr(enc, f)}, use_pooler=False)


def _mean_last(bert, params, ids, mask, k=LAST):
  out = _jit_apply(bert, output_hidden_states=True)({"params": params}, jnp.asarray(ids),
                                                    jnp.asarray(mask))
  return np.mean(np.stack(out.hidden_states[-k:]), 0)


@pytest.mark.parametrize("layout", ["split", "wrap"])
def test_vectorized_equals_sequential_outputs_and_grads(layout):
  enc = ChunkBert(**TINY, num_last_layers=LAST, chunk_size=8, layout=layout)
  seq = enc.clone(mode="sequential")
  ids, mask = _docs([29, 11, 3], 29)
  variables = jax.jit(enc.init)(jax.random.key(0), ids, mask)
  a, b = _jit_apply(enc)(variables, ids, mask), _jit_apply(seq)(variables, ids, mask)
  np.testing.assert_allclose(a.sequence, b.sequence, atol=1e-5)
  np.testing.assert_allclose(a.pooled, b.pooled, atol=1e-5)
  if layout == "wrap":
    return  # Gradients once (split layout) to keep the suite fast.
  loss = lambda m: lambda v: jnp.sum(m.apply(v, ids, mask).pooled ** 2)
  ga, gb = jax.jit(jax.grad(loss(enc)))(variables), jax.jit(jax.grad(loss(seq)))(variables)
  for x, y in zip(jax.tree_util.tree_leaves(ga), jax.tree_util.tree_leaves(gb)):
    np.testing.assert_allclose(x, y, atol=1e-4, rtol=1e-4)


def test_chunks_equal_bert_on_each_chunk_split_layout():
  """Slow reference from the paper: [CLS] doc [SEP], cut every C ids, BERT per chunk, mean of
  the last LAST hidden states, concatenate; [CLS]/[SEP] states dropped."""
  size = 8
  enc = ChunkBert(**TINY, num_last_layers=LAST, chunk_size=size)
  ids, mask = _docs([21, 6], 21)
  params = jax.jit(enc.init)(jax.random.key(1), ids, mask)["params"]
  out = _jit_apply(enc)({"params": params}, ids, mask)
  bert = _bert_of(enc)
  for row in range(2):
    n = int(mask[row].sum())
    full = np.array([CLS, *ids[row, :n], SEP], np.int32)
    states = []
    for start in range(0, len(full), size):
      piece = full[start:start + size]
      states.append(_mean_last(bert, params["bert"], piece[None], np.ones((1, len(piece)), bool))[0])
    ref = np.concatenate(states)[1:n + 1]
    np.testing.assert_allclose(np.asarray(out.sequence)[row, :n], ref, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out.sequence)[row, n:], 0)


def test_one_chunk_document_equals_bert_on_that_chunk():
  enc = ChunkBert(**TINY, num_last_layers=LAST, chunk_size=16)
  for layout in ("split", "wrap"):
    e = enc.clone(layout=layout)
    ids, mask = _docs([9], 9)
    params = jax.jit(e.init)(jax.random.key(2), ids, mask)["params"]
    got = _jit_apply(e)({"params": params}, ids, mask).sequence
    chunk = np.array([[CLS, *ids[0], SEP]], np.int32)
    ref = _mean_last(_bert_of(e), params["bert"], chunk, np.ones_like(chunk, bool))
    np.testing.assert_allclose(got[0], ref[0, 1:-1], atol=1e-5)


def test_wrap_layout_puts_cls_and_sep_in_every_chunk():
  enc = ChunkBert(**TINY, num_last_layers=LAST, chunk_size=6, layout="wrap")
  ids, mask = _docs([9], 12)
  ids_BNW, mask_BNW = enc.chunk(jnp.asarray(ids), jnp.asarray(mask))
  np.testing.assert_array_equal(ids_BNW[0, 0], [CLS, *ids[0, :4], SEP])
  np.testing.assert_array_equal(ids_BNW[0, 1], [CLS, *ids[0, 4:8], SEP])
  np.testing.assert_array_equal(ids_BNW[0, 2, :3], [CLS, ids[0, 8], SEP])
  assert not mask_BNW[0, 2, 3:].any()


@pytest.mark.parametrize("mode", ["vectorized", "sequential"])
def test_pad_chunks_never_change_predictions(mode):
  """Same document padded by whole extra chunks and batched with other companions."""
  enc = ChunkBert(**TINY, num_last_layers=LAST, chunk_size=8, mode=mode)
  ids_a, mask_a = _docs([13, 30], 30, seed=3)
  ids_b = np.zeros((3, 30 + 3 * 8), np.int32)
  mask_b = np.zeros(ids_b.shape, bool)
  ids_b[1, :13], mask_b[1, :13] = ids_a[0, :13], True
  ids_b[1, 13:] = 77  # Pad positions hold garbage ids: masked, so ignored.
  other, other_mask = _docs([50, 2], 54, seed=4)
  ids_b[[0, 2]], mask_b[[0, 2]] = other, other_mask
  variables = jax.jit(enc.init)(jax.random.key(3), ids_a, mask_a)
  run = _jit_apply(enc)
  a, b = run(variables, ids_a, mask_a), run(variables, ids_b, mask_b)
  np.testing.assert_allclose(a.pooled[0], b.pooled[1], atol=1e-5)
  np.testing.assert_allclose(a.sequence[0, :13], b.sequence[1, :13], atol=1e-5)
  np.testing.assert_array_equal(np.asarray(b.sequence)[1, 13:], 0)


@settings(max_examples=40)
@given(size=st.integers(3, 40), layout=st.sampled_from(["split", "wrap"]),
       longest=st.integers(1, 200))
def test_padding_fills_whole_chunks(size, layout, longest):
  """A batch padded by ``chunk_bert.padding`` (``data.pad_multiple``/``pad_offset`` of the
  configs) is exactly the chunks its longest document needs: none is only padding."""
  multiple, offset = chunk_bert.padding(size, layout)
  length = pipeline.padded_length(longest, multiple, offset)
  enc = ChunkBert(**TINY, chunk_size=size, layout=layout)
  ids = np.ones((1, length), np.int32)
  mask = np.arange(length)[None] < longest
  _, mask_BNW = jax.jit(enc.chunk)(jnp.asarray(ids), jnp.asarray(mask))
  needed = -(-(longest + 2) // size) if layout == "split" else -(-longest // (size - 2))
  assert mask_BNW.shape[1] == needed and bool(mask_BNW[0, -1].any())


@pytest.mark.parametrize("layout,cap", [("split", 14), ("wrap", 12)])
def test_training_cap_is_whole_chunks_and_zeroes_states_beyond_it(layout, cap):
  # max_train_length=16 with chunks of 8: two whole chunks with their [CLS]/[SEP], i.e. 14
  # word pieces ('split': [CLS] + 14 + [SEP]) or 12 ('wrap': 2 x (1 + 6 + 1)), never a
  # third chunk for the specials.
  enc = ChunkBert(**TINY, num_last_layers=LAST, chunk_size=8, max_train_length=16,
                  layout=layout, hidden_dropout_rate=0.0, attention_dropout_rate=0.0,
                  cnn_dropout_rate=0.0)
  assert enc.train_cap() == cap
  ids, mask = _docs([30], 30)
  assert enc.chunk(ids[:, :cap], mask[:, :cap])[0].shape[1] == 2
  assert enc.chunk(ids[:, :cap + 1], mask[:, :cap + 1])[0].shape[1] == 3
  variables = jax.jit(enc.init)(jax.random.key(0), ids, mask)
  train = _jit_apply(enc, deterministic=False, rngs={"dropout": jax.random.key(1)})(
      variables, ids, mask)
  cut = _jit_apply(enc)(variables, ids[:, :cap], mask[:, :cap])
  np.testing.assert_array_equal(np.asarray(train.sequence)[0, cap:], 0)
  np.testing.assert_allclose(train.sequence[0, :cap], cut.sequence[0], atol=1e-5)
  np.testing.assert_allclose(train.pooled, cut.pooled, atol=1e-5)


def test_textcnn_matches_kim_reference_and_ignores_pads():
  cnn = TextCNN(kernel_sizes=(1, 2, 3), num_filters=4, dropout_rate=0.0)
  rng = np.random.default_rng(5)
  x = rng.normal(size=(2, 9, 5)).astype(np.float32)
  mask = np.arange(9)[None] < np.array([[9], [4]])
  params = cnn.init(jax.random.key(0), x, mask)["params"]
  got = np.asarray(cnn.apply({"params": params}, x, mask))
  for row in range(2):
    n = int(mask[row].sum())
    feats = []
    for k in (1, 2, 3):
      w = np.asarray(params[f"conv_{k}"]["kernel"])  # [k, D, F]
      b = np.asarray(params[f"conv_{k}"]["bias"])
      left = (k - 1) // 2
      best = np.full(4, -np.inf)
      for i in range(n):  # A window centred on each real token; outside [0, n) is zero.
        window = np.zeros((k, 5), np.float32)
        for j in range(k):
          p = i - left + j
          if 0 <= p < n:
            window[j] = x[row, p]
        best = np.maximum(best, np.maximum(np.einsum("kd,kdf->f", window, w) + b, 0))
      feats.append(best)
    np.testing.assert_allclose(got[row], np.concatenate(feats), atol=1e-5)
  # Garbage at pads and a longer padding change nothing.
  x2 = np.concatenate([x, rng.normal(size=(2, 6, 5)).astype(np.float32)], 1)
  x2[1, 4:9] = 100.0
  mask2 = np.arange(15)[None] < np.array([[9], [4]])
  np.testing.assert_allclose(cnn.apply({"params": params}, x2, mask2), got, atol=1e-5)


def test_bert_first_equals_bert_on_first_positions():
  enc = BertFirst(**TINY, max_length=12)
  ids, mask = _docs([30, 7], 30)
  variables = jax.jit(enc.init)(jax.random.key(0), ids, mask)
  out = _jit_apply(enc)(variables, ids, mask)
  bert = bert_lib.Bert(**TINY)
  first = np.array([[CLS, *ids[0, :10], SEP]], np.int32)
  ref = _jit_apply(bert)({"params": variables["params"]["bert"]}, first, np.ones_like(first, bool))
  np.testing.assert_allclose(out.pooled[0], ref.pooled[0], atol=1e-5)
  np.testing.assert_allclose(out.sequence[0, :10], ref.sequence[0, 1:11], atol=1e-5)
  np.testing.assert_array_equal(np.asarray(out.sequence)[0, 10:], 0)


def test_bert_random_second_input_and_padding_invariance():
  enc = BertRandom(**TINY, max_length=12)
  ids, mask = _docs([30, 7], 40)
  variables = jax.jit(enc.init)(jax.random.key(0), ids, mask)
  out = _jit_apply(enc)(variables, ids, mask)
  pos, valid = enc.second_positions(jnp.asarray(mask), deterministic=True)
  assert valid[0].all() and not valid[1].any()  # Doc 2 fits the first input.
  assert (np.diff(np.asarray(pos[0])) > 0).all() and pos[0, 0] >= 10 and pos[0, -1] < 30
  bert = bert_lib.Bert(**TINY)
  second = np.array([[CLS, *ids[0, np.asarray(pos[0])], SEP]], np.int32)
  ref = _jit_apply(bert)({"params": variables["params"]["bert"]}, second,
                         np.ones_like(second, bool))
  np.testing.assert_allclose(out.pooled[0, 16:], ref.pooled[0], atol=1e-5)
  np.testing.assert_array_equal(np.asarray(out.pooled)[1, 16:], 0)
  # Training draws distinct, in-order positions from the rest of the document.
  pos_t, valid_t = enc.apply(variables, jnp.asarray(mask), False,
                             method=BertRandom.second_positions,
                             rngs={"dropout": jax.random.key(7)})
  p = np.asarray(pos_t[0])[np.asarray(valid_t[0])]
  assert len(p) == 10 and (np.diff(p) > 0).all() and p.min() >= 10 and p.max() < 30


def test_tobert_mean_excludes_pad_segments():
  enc = ToBert(**TINY, segment_length=8, overlap=2)
  ids, mask = _docs([17], 17)
  padded_ids, padded_mask = np.zeros((1, 17 + 20), np.int32), np.zeros((1, 37), bool)
  padded_ids[:, :17], padded_mask[:, :17] = ids, mask
  variables = jax.jit(enc.init)(jax.random.key(0), ids, mask)
  run = _jit_apply(enc)
  a, b = run(variables, ids, mask), run(variables, padded_ids, padded_mask)
  np.testing.assert_allclose(a.pooled, b.pooled, atol=1e-5)
  np.testing.assert_allclose(a.sequence, np.asarray(b.sequence)[:, :17], atol=1e-5)
  # Every word piece is covered: the state of piece p comes from segment p // stride.
  bert = bert_lib.Bert(**TINY)
  stride = 6 - 2
  seg = np.array([[CLS, *ids[0, 2 * stride:2 * stride + 6], SEP]], np.int32)
  ref = _jit_apply(bert)({"params": variables["params"]["bert"]}, seg, np.ones_like(seg, bool))
  np.testing.assert_allclose(a.sequence[0, 2 * stride:3 * stride], ref.sequence[0, 1:1 + stride],
                             atol=1e-5)


def _tiny_model_config(tmp_path=None):
  c = base_config()
  c.task.name = "classification"
  c.task.num_classes = 3
  c.model.input = "ids"
  c.model.encoder = ml_collections.ConfigDict(dict(
      name="chunk_bert", chunk_size=8, num_filters=8, num_last_layers=LAST, pretrained_path="",
      **TINY))
  return c


def test_model_ids_input_pretrained_load_and_training_step(tmp_path):
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  c = _tiny_model_config()
  model = model_lib.build_model(c)
  ids, mask = _docs([20, 12, 5, 17], 20)
  batch = {"input_ids": jnp.asarray(ids), "mask": jnp.asarray(mask),
           "label": jnp.asarray([0, 1, 2, 1])}
  params = jax.jit(model.init)(jax.random.key(0), batch)["params"]
  assert "inputs" not in params and set(params["encoder"]) == {"bert", "textcnn"}

  # A HF-named checkpoint of the same architecture: apply_pretrained copies it in.
  shapes = params["encoder"]["bert"]
  state = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
    name, transform = ckpt_lib._hf_name(tuple(k.key for k in path))  # pylint: disable=protected-access
    value = np.full(leaf.shape, 0.01 * len(state), np.float32)
    state[name] = value.T if transform == "transpose" else value
  save_file(state, str(tmp_path / "model.safetensors"))
  c.model.encoder.pretrained_path = str(tmp_path)
  loaded = ckpt_lib.apply_pretrained(c, params)
  q = loaded["encoder"]["bert"]["layer_1"]["attention"]["query"]["kernel"]
  np.testing.assert_array_equal(q, state["encoder.layer.1.attention.self.query.weight"].T)
  np.testing.assert_array_equal(loaded["head"]["out"]["kernel"], params["head"]["out"]["kernel"])

  # Wrong architecture for the checkpoint: loud error naming the parameter.
  c2 = _tiny_model_config()
  c2.model.encoder.intermediate_size = 24
  p2 = jax.jit(model_lib.build_model(c2).init)(jax.random.key(0), batch)["params"]
  with pytest.raises(ValueError, match=r"intermediate\.dense"):
    ckpt_lib.load_pretrained_into(p2, str(tmp_path))

  # Loss goes down on a fixed batch.
  task_loss = lambda p: _loss(model, c, p, batch)
  opt = optax.adam(3e-3)
  state_opt = opt.init(params)
  task_loss = jax.jit(task_loss)
  first = float(task_loss(params))
  step = jax.jit(lambda p, s: _step(opt, task_loss, p, s))
  for _ in range(8):
    params, state_opt = step(params, state_opt)
  assert float(task_loss(params)) < 0.5 * first


def _loss(model, c, params, batch):
  from longtext_jax import tasks as tasks_lib  # pylint: disable=import-outside-toplevel
  out = model.apply({"params": params}, batch)
  total, weight = tasks_lib.get_task(c.task).loss(out, batch)
  return total / weight


def _step(opt, loss_fn, params, opt_state):
  grads = jax.grad(loss_fn)(params)
  updates, opt_state = opt.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state


def test_build_model_rejects_mismatched_input_kind():
  c = _tiny_model_config()
  c.model.input = "tokens"
  with pytest.raises(ValueError, match="input='ids'"):
    model_lib.build_model(c)


def test_pretrained_arch_read_from_config_json(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(
      {"hidden_size": 24, "num_hidden_layers": 3, "num_attention_heads": 4,
       "intermediate_size": 48, "vocab_size": 99, "position_embedding_type": "absolute"}))
  arch = ckpt_lib.read_arch(str(tmp_path))
  assert arch == {"hidden_size": 24, "num_layers": 3, "num_heads": 4,
                  "intermediate_size": 48, "vocab_size": 99}


def test_benchmark_configs_build_for_every_dataset_and_encoder():
  cfg = load_script("configs/chunkbert/long_benchmark.py")
  for dataset, (task, num_classes, _, metric) in cfg.DATASETS.items():
    for encoder in cfg.ENCODERS:
      c = cfg.get_config(f"{dataset},{encoder},tiny")
      model_lib.build_model(c)
      assert (c.task.name, c.task.num_classes, c.train.best_metric) == (task, num_classes, metric)
  with pytest.raises(ValueError, match="unknown option"):
    cfg.get_config("eurlex,tobert,big")


def test_long_subset_keeps_documents_over_510_pieces():
  from longtext_jax.data.long_subset import long_subset  # pylint: disable=import-outside-toplevel
  split = {"mask": np.arange(600)[None] < np.array([[100], [511], [600], [510]]),
           "label": np.arange(4), "num_pieces": np.array([100, 511, 3000, 510])}
  out = long_subset(split)
  np.testing.assert_array_equal(out["label"], [1, 2])
  np.testing.assert_array_equal(out["example_id"], [1, 2])


@pytest.mark.long  # The trainer's long-subset report has a fast test in test_train.py.
def test_benchmark_config_trains_on_jsonl_and_reports_the_long_subset(tmp_path):
  """configs/chunkbert/long_benchmark.py reads recipe-format JSONL through the WordPiece
  vocabulary and reports the > threshold subset beside the full test set."""
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  words = ["alpha", "beta", "gamma", "delta"]
  (tmp_path / "vocab.txt").write_text("\n".join(
      ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
  rng = np.random.default_rng(0)
  for split, n in (("train", 24), ("test", 12)):
    with open(tmp_path / f"{split}.jsonl", "w") as f:
      for i in range(n):
        length = 40 if i % 3 == 0 else 10  # A third of the documents are "long" (> 20).
        label = "true" if i % 2 else "false"
        text = " ".join(rng.choice(words, length)) + (" alpha" if label == "true" else " beta")
        f.write(json.dumps({"text": text, "label": label}) + "\n")
  cfg = load_script("configs/chunkbert/long_benchmark.py")
  c = cfg.get_config("hyperpartisan,chunk_bert,tiny")
  c.data.tokenizer.path = str(tmp_path / "vocab.txt")
  c.data.train_path, c.data.eval_path = str(tmp_path / "train.jsonl"), str(tmp_path / "test.jsonl")
  c.data.long_threshold = 20
  c.model.encoder.update(cls_id=2, sep_id=3)  # This vocabulary's [CLS]/[SEP].
  c.train.num_steps, c.train.eval_every, c.train.checkpoint_every = 2, 2, 2
  final = train.train_and_evaluate(c, str(tmp_path / "run"))
  assert {"accuracy", "eval_long/accuracy"} <= set(final)


@pytest.mark.parametrize("route", ["init_from", "pretrained_path"])
def test_prepare_keeps_a_padded_checkpoint_table_and_checks_the_tokenizer_fits(tmp_path,
                                                                               route):
  """A checkpoint whose embedding table is padded past its vocabulary (30528 rows for 30522
  pieces is common; here 40 for 31): prepare_config keeps the table size of config.json on
  both warm-start routes (the weights then load), and a tokenizer larger than the table is
  an error naming both sizes."""
  from longtext_jax.train import init_from, prepare  # pylint: disable=import-outside-toplevel
  folder = tmp_path / "bert"
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [chr(97 + i) for i in range(26)]
  hf_folders.write_folder(folder, dict(hf_folders.TINY, vocab_size=40,
                                       max_position_embeddings=128), scale=0.02)
  (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
  corpus = own_corpus_data.write_corpus(str(tmp_path / "corpus"), n_train=2, n_test=1)

  def config(vocab_size=None):
    c = load_config("text_classification.py",
                    f"local,tiny,encoder=chunk_bert,pretrained={folder}")
    c.data.train_path = corpus["train"]
    c.train.progress_bar = False
    if route == "init_from":  # docs/chunkbert.md's route.
      c.model.encoder.pretrained_path = ""
      c.init_from.kind, c.init_from.path = "hf_bert", str(folder)
    if vocab_size is not None:
      c.model.encoder.vocab_size = vocab_size
    return c

  prepared = prepare.prepare_config(config(), str(tmp_path / "run"))
  assert prepared.model.encoder.vocab_size == 40 and prepared.model.vocab_size == len(vocab)
  model = model_lib.build_model(prepared)
  batch = {"input_ids": np.zeros((1, 8), np.int32), "mask": np.ones((1, 8), bool)}
  params = jax.tree_util.tree_map(
      lambda s: np.zeros(s.shape, s.dtype),
      jax.eval_shape(lambda: model.init(jax.random.key(0), batch))["params"])
  loaded, applied = init_from.apply(prepared, params, None)
  assert applied == [("hf_bert", str(folder))]
  assert loaded["encoder"]["bert"]["embeddings"]["word_embeddings"]["embedding"].shape == (
      40, 16)
  with pytest.raises(ValueError, match=rf"vocab_size=20, but the tokenizer .* has 31 ids, "
                                       rf"more than the embedding table of the checkpoint "
                                       rf"{folder} holds"):
    prepare.prepare_config(config(vocab_size=20), str(tmp_path / "run"))
