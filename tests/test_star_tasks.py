"""Span-F1 tagging, CRF tagging and the shared-encoder pair model, through build_model."""
import numpy as np
import jax
import jax.numpy as jnp
import optax
import pytest

from longtext_jax import metrics_conll, tasks
from longtext_jax.config import base_config, encoder_config
from longtext_jax.model import build_model
from longtext_jax.pair_model import PairModel

jax.config.update("jax_numpy_rank_promotion", "raise")

NAMES = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def _config(task, **task_fields):
  c = base_config()
  c.task.name = task
  c.task.num_classes = len(NAMES) if "tagging" in task else 3
  for k, v in task_fields.items():
    setattr(c.task, k, v)
  c.model.input = "tokens"
  c.model.vocab_size = 12
  c.task.vocab_size = 12  # (main before the trainer compared these for every task)
  c.model.d_model = 16
  c.model.encoder = encoder_config("star_transformer", num_cycles=1, num_heads=2,
                                   dropout_rate=0.0, max_len=16)
  return c


def test_span_tagging_metrics_match_python_span_f1():
  task = tasks.get_task(_config("span_tagging", tag_names=NAMES).task)
  gold = np.array([[1, 2, 0, 3, 0], [3, 4, 4, 0, 0]])
  pred = np.array([[1, 0, 0, 3, 0], [3, 4, 4, 1, 2]])  # row 1's last two tags are pads
  mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
  logits = jax.nn.one_hot(pred, len(NAMES)) * 5.0
  sums = task.metrics({"logits": logits}, {"tags": gold, "mask": mask})
  out = task.summarize(jax.device_get(sums))
  ref = metrics_conll.span_f1([[NAMES[i] for i in g[m]] for g, m in zip(gold, mask)],
                              [[NAMES[i] for i in p[m]] for p, m in zip(pred, mask)])
  np.testing.assert_allclose(out["span_f1"], ref["f1"])
  np.testing.assert_allclose(out["span_precision"], 2 / 3)
  np.testing.assert_allclose(out["token_accuracy"], 7 / 8)


def test_tag_names_must_match_num_classes():
  task = tasks.get_task(_config("span_tagging", tag_names=NAMES[:3]).task)
  with pytest.raises(ValueError, match="tag_names"):
    task.metrics({"logits": jnp.zeros((1, 2, 5))},
                 {"tags": np.zeros((1, 2), int), "mask": np.ones((1, 2), bool)})


def _tagging_data(rng, n, length):
  """Tokens 1-4 are names, 5-8 places, others O; a run of equal-kind tokens is one entity."""
  ids = rng.integers(1, 12, (n, length))
  kind = np.where(ids <= 4, 1, np.where(ids <= 8, 2, 0))  # 0 O, 1 PER, 2 LOC
  prev = np.pad(kind[:, :-1], ((0, 0), (1, 0)))
  tags = np.where(kind == 0, 0, 2 * kind - 1 + (prev == kind))  # B = 2k-1, I = 2k
  lengths = rng.integers(3, length + 1, n)
  mask = np.arange(length)[None] < lengths[:, None]
  return {"input_ids": np.where(mask, ids, 0), "tags": np.where(mask, tags, 0), "mask": mask}


def test_crf_tagging_trains_with_star_transformer():
  config = _config("crf_tagging", tag_names=NAMES)
  model = build_model(config)
  task = tasks.get_task(config.task)
  batch = _tagging_data(np.random.default_rng(0), 32, 8)
  task.validate(batch)
  params = jax.jit(lambda b: model.init(jax.random.key(0), b))(batch)["params"]
  opt = optax.adam(1e-2)

  @jax.jit
  def step(params, opt_state):
    def loss_fn(p):
      loss_sum, weight = task.loss(model.apply({"params": p}, batch), batch)
      return loss_sum / weight
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss

  opt_state = opt.init(params)
  losses = []
  for _ in range(40):
    params, opt_state, loss = step(params, opt_state)
    losses.append(float(loss))
  assert losses[-1] < 0.3 * losses[0], losses
  sums = jax.jit(lambda p: task.metrics(model.apply({"params": p}, batch), batch))(params)
  out = task.summarize(jax.device_get(sums))
  assert out["token_accuracy"] > 0.9 and out["span_f1"] > 0.8, out
  assert set(params["head"]) == {"crf", "out"}


def test_pair_model_encodes_each_sentence_alone_with_the_shared_encoder():
  config = _config("pair_classification", head_hidden_dim=8)
  model = build_model(config)
  assert isinstance(model, PairModel)
  rng = np.random.default_rng(1)
  premise_lens, hyp_lens, length = [3, 5], [4, 2], 9
  ids = rng.integers(1, 12, (2, length))
  tt = np.zeros((2, length), np.int32)
  mask = np.zeros((2, length), bool)
  for b, (p, h) in enumerate(zip(premise_lens, hyp_lens)):
    tt[b, p:p + h] = 1
    mask[b, :p + h] = True
  batch = {"input_ids": np.where(mask, ids, 0), "token_type_ids": tt, "mask": mask,
           "label": np.array([0, 2])}
  tasks.get_task(config.task).validate(batch)
  variables = jax.jit(model.init)(jax.random.key(0), batch)
  out = jax.jit(model.apply)(variables, batch)
  assert out["logits"].shape == (2, 3) and out["pooled"].shape == (2, 64)

  encoder = model.encoder
  emb = variables["params"]["inputs"]["embed"]["embedding"]
  enc_vars = {"params": variables["params"]["encoder"]}
  # Each sentence alone at the start of its own row: [premise 0, hyp 0, premise 1, hyp 1].
  alone_ids = np.zeros((4, length), np.int64)
  alone_mask = np.zeros((4, length), bool)
  for b, (p, h) in enumerate(zip(premise_lens, hyp_lens)):
    for sent, (start, n) in enumerate([(0, p), (p, h)]):
      alone_ids[2 * b + sent, :n] = ids[b, start:start + n]
      alone_mask[2 * b + sent, :n] = True
  alone = jax.jit(lambda x, m: encoder.apply(enc_vars, x, m).pooled)(
      emb[alone_ids], alone_mask)
  np.testing.assert_allclose(out["pooled"][:, :32], np.asarray(alone).reshape(2, 32),
                             atol=1e-5)
  y1, y2 = out["pooled"][:, :16], out["pooled"][:, 16:32]
  np.testing.assert_allclose(out["pooled"][:, 32:48], jnp.abs(y1 - y2), atol=1e-6)
  np.testing.assert_allclose(out["pooled"][:, 48:], y1 * y2, atol=1e-6)


def test_pair_validation_rejects_premise_after_hypothesis():
  task = tasks.get_task(_config("pair_classification").task)
  batch = {"token_type_ids": np.array([[0, 1, 0]]), "mask": np.ones((1, 3), bool),
           "label": np.array([1])}
  with pytest.raises(ValueError, match="token_type_ids"):
    task.validate(batch)
