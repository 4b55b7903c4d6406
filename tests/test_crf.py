"""Linear-chain CRF against brute-force enumeration of every tag path."""
import itertools

import numpy as np
import jax
import jax.numpy as jnp
import pytest

from longtext_jax.layers.crf import (CRF, crf_log_likelihood, crf_log_partition,
                                     crf_path_score, crf_viterbi)

jax.config.update("jax_numpy_rank_promotion", "raise")

C, L = 3, 5
MASK = np.array([[1, 1, 1, 1, 1],   # full
                 [1, 1, 1, 0, 0],   # padded
                 [0, 1, 0, 1, 1],   # holes: masked steps are removed from the chain
                 [0, 0, 0, 0, 0],   # empty
                 [1, 0, 0, 0, 0]], bool)


def _params(seed=0):
  rng = np.random.default_rng(seed)
  em = rng.normal(size=(len(MASK), L, C)).astype(np.float32)
  trans = rng.normal(size=(C, C)).astype(np.float32)
  start = rng.normal(size=(C,)).astype(np.float32)
  end = rng.normal(size=(C,)).astype(np.float32)
  return em, trans, start, end


def _brute_scores(em_LC, mask_L, trans, start, end):
  """{path over the real positions: score}, straight from the definition."""
  real = np.flatnonzero(mask_L)
  out = {}
  for path in itertools.product(range(C), repeat=len(real)):
    if not path:
      out[path] = 0.0
      continue
    s = start[path[0]] + end[path[-1]] + sum(em_LC[t, y] for t, y in zip(real, path))
    s += sum(trans[a, b] for a, b in zip(path[:-1], path[1:]))
    out[path] = float(s)
  return out


def test_log_partition_and_likelihood_match_brute_force():
  em, trans, start, end = _params()
  tags = np.random.default_rng(1).integers(0, C, size=(len(MASK), L))
  log_z = jax.jit(crf_log_partition)(em, MASK, trans, start, end)
  ll = jax.jit(crf_log_likelihood)(em, tags, MASK, trans, start, end)
  for b in range(len(MASK)):
    scores = _brute_scores(em[b], MASK[b], trans, start, end)
    ref_z = np.logaddexp.reduce(list(scores.values())) if MASK[b].any() else 0.0
    path = tuple(int(t) for t in tags[b][MASK[b]])
    np.testing.assert_allclose(log_z[b], ref_z, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ll[b], scores[path] - ref_z, rtol=1e-5, atol=1e-5)
  # Probabilities of all paths of a row sum to one.
  assert np.all(np.asarray(ll) <= 1e-6)


def test_viterbi_matches_brute_force_argmax():
  for seed in range(3):
    em, trans, start, end = _params(seed)
    tags, score = jax.jit(crf_viterbi)(em, MASK, trans, start, end)
    for b in range(len(MASK)):
      scores = _brute_scores(em[b], MASK[b], trans, start, end)
      best = max(scores, key=scores.get)
      assert tuple(int(t) for t in tags[b][MASK[b]]) == best
      np.testing.assert_array_equal(tags[b][~MASK[b]], 0)
      np.testing.assert_allclose(score[b], scores[best], rtol=1e-5, atol=1e-5)


def test_masked_steps_are_ignored():
  em, trans, start, end = _params(4)
  tags = np.random.default_rng(5).integers(0, C, size=(len(MASK), L))
  garbage_em = np.where(MASK[..., None], em, 1e3).astype(np.float32)
  garbage_tags = np.where(MASK, tags, C - 1)
  f = jax.jit(lambda e, t: (crf_log_likelihood(e, t, MASK, trans, start, end),
                            crf_viterbi(e, MASK, trans, start, end)))
  (ll_a, (v_a, s_a)), (ll_b, (v_b, s_b)) = f(em, tags), f(garbage_em, garbage_tags)
  np.testing.assert_allclose(ll_a, ll_b, rtol=1e-6)
  np.testing.assert_array_equal(v_a, v_b)
  np.testing.assert_allclose(s_a, s_b, rtol=1e-6)


def test_gradient_of_nll_is_expected_minus_observed_counts():
  """d(-log p)/d(emissions) = marginals - one_hot(tags) at real positions, 0 at masked."""
  em, trans, start, end = _params(6)
  tags = np.random.default_rng(7).integers(0, C, size=(len(MASK), L))
  grad = jax.jit(jax.grad(lambda e: -jnp.sum(
      crf_log_likelihood(e, tags, MASK, trans, start, end))))(em)
  for b in (0, 2):
    scores = _brute_scores(em[b], MASK[b], trans, start, end)
    real = np.flatnonzero(MASK[b])
    z = np.logaddexp.reduce(list(scores.values()))
    marg = np.zeros((L, C))
    for path, s in scores.items():
      for t, y in zip(real, path):
        marg[t, y] += np.exp(s - z)
    onehot = np.zeros((L, C))
    onehot[real, tags[b][real]] = 1
    np.testing.assert_allclose(grad[b], marg - onehot, atol=1e-5)


def test_crf_module_params_and_bad_shapes():
  trans, start, end = CRF(4).apply(CRF(4).init(jax.random.key(0)))
  assert trans.shape == (4, 4) and start.shape == (4,) and end.shape == (4,)
  em, trans3, start3, end3 = _params()
  with pytest.raises(ValueError, match="transitions"):
    crf_log_partition(em, MASK, trans, start, end)
  with pytest.raises(ValueError, match="mask"):
    crf_viterbi(em, MASK[:, :3], trans3, start3, end3)
  with pytest.raises(ValueError, match="emissions"):
    crf_path_score(em[0], MASK[0], MASK[0], trans3, start3, end3)


@pytest.mark.parametrize("names", [("O", "B-PER", "I-PER", "B-LOC", "I-LOC"),
                                   ("O", "B-X", "I-X", "E-X", "S-X")])
def test_constrained_viterbi_is_the_best_well_formed_path(names):
  """With allowed_transitions, Viterbi gives the brute-force best path among those whose
  every tag sequence is well formed (BIO: no I-X after O or another type, none first;
  IOBES: also B/I continued by I/E of the type, never last), on random scores that favour
  ill-formed paths."""
  from longtext_jax import metrics_conll  # pylint: disable=import-outside-toplevel
  allowed, may_start, may_end = metrics_conll.allowed_transitions(names)
  c = len(names)
  inside = np.array([n[0] in "IE" for n in names])
  for seed in range(2):
    rng = np.random.default_rng(seed)
    em = rng.normal(size=(len(MASK), L, c)).astype(np.float32)
    em[..., inside] += 1.5  # I-/E- tags everywhere would win unconstrained.
    trans = rng.normal(size=(c, c)).astype(np.float32)
    start, end = rng.normal(size=(c,)).astype(np.float32), rng.normal(size=(c,)).astype(
        np.float32)
    tags, score = jax.jit(crf_viterbi)(em, MASK, trans, start, end,
                                       (allowed, may_start, may_end))
    for b in range(len(MASK)):
      real = np.flatnonzero(MASK[b])
      best, best_score = (), 0.0
      for path in itertools.product(range(c), repeat=len(real)):
        if path and not (may_start[path[0]] and may_end[path[-1]] and all(
            allowed[x, y] for x, y in zip(path[:-1], path[1:]))):
          continue
        s = (start[path[0]] + end[path[-1]] + sum(em[b, t, y] for t, y in zip(real, path))
             + sum(trans[x, y] for x, y in zip(path[:-1], path[1:]))) if path else 0.0
        if not best or s > best_score:
          best, best_score = path, s
      assert tuple(int(t) for t in tags[b][MASK[b]]) == best, (b, seed)
      np.testing.assert_allclose(score[b], best_score, rtol=1e-5, atol=1e-5)
  free, _ = jax.jit(crf_viterbi)(em, MASK, trans, start, end)
  assert not np.array_equal(free, tags)  # The constraint changed some path.


def test_crf_tagging_decodes_constrained_unless_told_not_to():
  """The task wiring: crf_tagging with tag_names decodes well-formed paths by default
  (task.constrained_decoding); False gives the free Viterbi path."""
  from longtext_jax import tasks  # pylint: disable=import-outside-toplevel
  from longtext_jax.config import base_config  # pylint: disable=import-outside-toplevel
  config = base_config().task
  config.name, config.num_classes = "crf_tagging", 3
  config.tag_names = ("O", "B-X", "I-X")
  em = np.zeros((1, 3, 3), np.float32)
  em[0, :, 2] = 5.0  # I-X everywhere: ill formed (an I first).
  outputs = {"crf": {"emissions": jnp.asarray(em), "transitions": jnp.zeros((3, 3)),
                     "start": jnp.zeros(3), "end": jnp.zeros(3)}}
  mask = jnp.ones((1, 3), bool)
  assert np.asarray(tasks.get_task(config).viterbi(outputs, mask)).tolist() == [[1, 2, 2]]
  config.constrained_decoding = False
  assert np.asarray(tasks.get_task(config).viterbi(outputs, mask)).tolist() == [[2, 2, 2]]
