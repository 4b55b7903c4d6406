"""Attention on CPU: the heads-major form against ``jax.nn.dot_product_attention``, and the
blocked form against the heads-major one.

Two measurements, each variant timed side by side in one process (round robin, best of
``--repeats`` in process CPU time, wall time beside it), of two variants (``--compare``):

* ``ops``: the attention op alone (forward, and forward+backward of a weighted sum of its
  output) at the shapes of this project's configs: masked summation's Transformer (32 x 200,
  10 heads of 10), ChunkBERT's MiniLM chunks (8 documents x 16 chunks of 130 pieces, 12
  heads of 32), BERT-first (8 x 512), the own-corpus Transformer (16 x 1,024, 4 heads of 32).
* ``steps``: the bare jitted train step (``loop.compile_steps``, batches on the device) of
  whole configs: the own-corpus Transformer on generated text, masked summation's
  Transformer at the paper's setting, BERT-first and ChunkBERT at MiniLM's size (random
  weights; the pretrained ones are the same shapes), and the demo RAN.

``old`` is what ran before 24 Nov: ``jax.nn.dot_product_attention`` (XLA) on the [B, T, H, K]
operands for the Transformer and RAN, and the Bert's previous einsums, which contracted the
same [B, T, H, K] layout; ``new`` is the default on CPU (``layers.attention``: heads-major,
or blocked for large logits). ``heads_major`` and ``blocked`` force one form wherever the
default would choose (``--compare heads_major,blocked``, with the op rows' compiled memory of
the gradient beside; the Bert keeps its own heads-major attention). All compute the same
function (tests/test_attention.py).

  PYTHONPATH=. python experiments/attention_cpu.py --out docs/benchmarks/attention_cpu.json
  PYTHONPATH=. python experiments/attention_cpu.py --compare heads_major,blocked \
      --shapes all --cases msum_transformer,msum_transformer_n400,msum_transformer_n800,text_transformer \
      --out docs/benchmarks/attention_blocked_cpu.json
  PYTHONPATH=. python experiments/attention_cpu.py --tiny     # seconds (tests)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from configs import default as default_config  # noqa: E402  pylint: disable=wrong-import-position
from configs import masked_summation as msum_config  # noqa: E402  pylint: disable=wrong-import-position
from configs import text_classification  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.encoders import bert as bert_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.layers import attention  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import loop  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import prepare as prepare_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import sharding as shard_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import benchmark as harness  # noqa: E402  pylint: disable=wrong-import-position

# (name, batch, T, heads, head_dim) of the op measurement.
OP_SHAPES = (("masked_summation_transformer", 32, 200, 10, 10),
             ("chunkbert_minilm_chunks", 128, 130, 12, 32),
             ("bert_first_minilm", 8, 512, 12, 32),
             ("own_corpus_transformer", 16, 1024, 4, 32))
# More shapes for ``--shapes all``: masked summation at n = 400 and 800, a long document.
MORE_OP_SHAPES = (("masked_summation_transformer_n400", 32, 400, 10, 10),
                  ("masked_summation_transformer_n800", 32, 800, 10, 10),
                  ("long_document_transformer", 2, 4096, 4, 32))
STEP_CASES = ("text_transformer", "msum_transformer", "bert_first", "chunk_bert", "demo_ran")
MORE_STEP_CASES = ("msum_transformer_n400", "msum_transformer_n800")
# The implementation each variant gives ``dot_product_attention`` where its caller leaves
# the choice (None); 'new' keeps the default.
VARIANTS = {"old": "xla", "new": None, "heads_major": "heads_major", "blocked": "blocked"}


def _batch_first_layout(q_BTHK, k_BSHK, v_BSHK, mask, probs_fn=None):
  """The Bert's attention before the heads-major change: einsums over [B, T, H, K]."""
  logits = jnp.einsum("bqhk,bshk->bhqs", q_BTHK, k_BSHK,
                      preferred_element_type=jnp.float32) * q_BTHK.shape[-1] ** -0.5
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(logits, axis=-1)
  if probs_fn is not None:
    probs = probs_fn(probs)
  return jnp.einsum("bhqs,bshk->bqhk", probs.astype(v_BSHK.dtype), v_BSHK)


@contextlib.contextmanager
def variant(name: str):
  """Inside: the attention of every module traced is ``name`` (a key of ``VARIANTS``; 'old'
  also gives the Bert its batch-first einsums)."""
  forced = VARIANTS[name]
  if forced is None:
    yield
    return
  resolve, bert_attention = attention.resolve_implementation, bert_lib.heads_major_attention
  attention.resolve_implementation = (
      lambda impl, backend=None, logits_bytes=None: resolve(impl or forced, backend))
  if name == "old":
    bert_lib.heads_major_attention = _batch_first_layout
  try:
    yield
  finally:
    attention.resolve_implementation, bert_lib.heads_major_attention = resolve, bert_attention


def _cpu_time() -> float:
  return time.process_time()


def time_round_robin(fns: dict, repeats: int) -> dict:
  """{name: (best CPU s, best wall s)} of zero-argument callables, interleaved."""
  best = {k: [np.inf, np.inf] for k in fns}
  for _ in range(repeats):
    for k, f in fns.items():
      c0, w0 = _cpu_time(), time.perf_counter()
      jax.block_until_ready(f())
      best[k][0] = min(best[k][0], _cpu_time() - c0)
      best[k][1] = min(best[k][1], time.perf_counter() - w0)
  return {k: tuple(v) for k, v in best.items()}


def op_rows(tiny: bool, repeats: int, compare=("old", "new"), shapes=OP_SHAPES
            ) -> list[dict]:
  """The attention op alone at each of ``shapes``, the two variants of ``compare``; with
  the compiled memory of the gradient when ``compare`` is not old against new."""
  rows = []
  first, second = compare
  for name, b, t, h, k in shapes:
    if tiny:
      b, t = 2, 16
    rng = np.random.default_rng(0)
    q, kk, v = (jnp.asarray(rng.normal(size=(b, t, h, k)), jnp.float32) for _ in range(3))
    mask = jnp.asarray(np.arange(t)[None, None, None] < rng.integers(t // 2, t + 1, (b, 1, 1, 1)))
    w = jnp.asarray(rng.normal(size=(b, t, h, k)), jnp.float32)
    fns, memory = {}, {}
    for label in compare:
      impl = VARIANTS[label]
      fwd = jax.jit(lambda q, kk, v, impl=impl: attention.dot_product_attention(q, kk, v, mask,
                                                                                 impl))
      grad = jax.jit(jax.grad(lambda q, kk, v, impl=impl: jnp.sum(
          attention.dot_product_attention(q, kk, v, mask, impl) * w), argnums=(0, 1, 2)))
      fns[f"{label}_fwd"] = lambda f=fwd: f(q, kk, v)
      fns[f"{label}_fwd_bwd"] = lambda f=grad: f(q, kk, v)
      if compare != ("old", "new"):
        memory[f"{label}_fwd_bwd_temp_mib"] = (
            grad.lower(q, kk, v).compile().memory_analysis().temp_size_in_bytes / 2**20)
    for f in fns.values():  # Compile.
      jax.block_until_ready(f())
    times = time_round_robin(fns, repeats)
    row = {"kind": "op", "case": name, "shape": [b, t, h, k], **memory}
    if compare != ("old", "new"):
      row["compare"] = list(compare)
    for key, (cpu, wall) in times.items():
      row[f"{key}_cpu_ms"], row[f"{key}_wall_ms"] = 1000 * cpu, 1000 * wall
    for mode in ("fwd", "fwd_bwd"):
      row[f"{mode}_speedup_cpu"] = times[f"{first}_{mode}"][0] / times[f"{second}_{mode}"][0]
    print(json.dumps(row), flush=True)
    rows.append(row)
  return rows


def step_config(case: str, tiny: bool, corpus: str):
  """The config of a train-step case."""
  if case == "text_transformer":
    c = text_classification.get_config("local,encoder=transformer" + (",tiny" if tiny else ""))
  elif case in ("bert_first", "chunk_bert"):
    # 'long': the BERT shapes measured in docs/benchmarks.md (the default before 25 Nov).
    c = text_classification.get_config(f"local,encoder={case},long"
                                       + (",tiny" if tiny else ""))
  elif case.startswith("msum_transformer"):
    n = case.partition("_n")[2]  # msum_transformer_n800: n=800 (the paper's 200 otherwise).
    c = msum_config.get_config("transformer,paper" + (",tiny" if tiny else "")
                               + (f",n={n}" if n and not tiny else ""))
  elif case == "demo_ran":
    c = default_config.get_config()
    if tiny:
      c.unlock()
      c.model.d_model, c.data.seq_len, c.data.min_len = 16, 256, 128
  else:
    raise ValueError(f"unknown case {case!r}; choose from {STEP_CASES}")
  c.unlock()
  if c.data.name == "local":
    c.data.train_path, c.data.eval_fraction = corpus, 0.1
    c.train.num_epochs = 0.0
    enc = c.model.encoder
    if case in ("bert_first", "chunk_bert") and not tiny and not enc.pretrained_path:
      # Without the bundled MiniLM: its shapes with random weights (the same program).
      enc.update(hidden_size=384, num_layers=6, num_heads=12, intermediate_size=1536,
                 max_position_embeddings=512)
      c.model.d_model = 384
  return c


def _stepper(train_step, data, state):
  """A zero-argument callable running ``train_step`` over ``data`` from the state it
  reached last (the state is donated, so each call continues from the previous one)."""
  box = {"state": state}

  def call():
    for batch in data:
      box["state"], metrics = train_step(box["state"], batch, jax.random.key(1))
    return metrics
  return call


def step_rows(cases, tiny: bool, repeats: int, corpus: str, batches: int,
              compare=("old", "new")) -> list[dict]:
  """The bare train step of each case, the two variants of ``compare``."""
  base, other = compare
  rows = []
  for case in cases:
    config = step_config(case, tiny, corpus)
    fns, meta = {}, {}
    with tempfile.TemporaryDirectory() as workdir:
      config = prepare_lib.prepare_config(config, workdir)
      for label in compare:
        with variant(label):
          run = loop.make_run(config, workdir)
          splits = loop.build_data(config, run.task)
          first = loop._strip_host_keys(  # pylint: disable=protected-access
              loop._first_batch_shapes(splits["train"], 2, run.pad_multiple))  # pylint: disable=protected-access
          spec = loop.build_state(run, first)
          state = spec.init(jax.random.key(config.seed))
          train_step, _ = loop.compile_steps(run, spec)
          it = loop.make_train_iterator(config, splits["train"])
          data = [shard_lib.to_global(loop._strip_host_keys(next(it)), run.mesh)  # pylint: disable=protected-access
                  for _ in range(batches)]
          t0 = time.perf_counter()
          for batch in data:  # Traced and compiled here, under the variant.
            state, metrics = train_step(state, batch, jax.random.key(1))
          jax.block_until_ready(metrics)
          meta[f"{label}_first_calls_s"] = time.perf_counter() - t0
          meta["tokens_per_batch"] = int(np.prod(data[0]["mask"].shape))

        fns[label] = _stepper(train_step, data, state)
    times = time_round_robin(fns, repeats)
    row = {"kind": "step", "case": case, "encoder": config.model.encoder.name,
           "batches_per_call": batches, **meta}
    if compare != ("old", "new"):
      row["compare"] = list(compare)
    for key, (cpu, wall) in times.items():
      row[f"{key}_step_cpu_s"], row[f"{key}_step_wall_s"] = cpu / batches, wall / batches
    row["speedup_cpu"] = times[base][0] / times[other][0]
    row["speedup_wall"] = times[base][1] / times[other][1]
    print(json.dumps(row), flush=True)
    rows.append(row)
  return rows


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--parts", default="ops,steps")
  parser.add_argument("--cases", default=",".join(STEP_CASES))
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--batches", type=int, default=2, help="train steps per timed call")
  parser.add_argument("--corpus", default="",
                      help="JSONL training file of the text cases (default: a generated one)")
  parser.add_argument("--compare", default="old,new",
                      help=f"two variants, timed first against second: {sorted(VARIANTS)}")
  parser.add_argument("--shapes", choices=("configs", "all"), default="configs",
                      help="op shapes: those of the configs, or those and MORE_OP_SHAPES")
  parser.add_argument("--tiny", action="store_true")
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)
  parts = args.parts.split(",")
  compare = tuple(args.compare.split(","))
  if len(compare) != 2 or not set(compare) <= set(VARIANTS):
    parser.error(f"--compare takes two of {sorted(VARIANTS)}, got {args.compare!r}")
  shapes = OP_SHAPES + (MORE_OP_SHAPES if args.shapes == "all" else ())
  for case in args.cases.split(","):
    if case not in STEP_CASES + MORE_STEP_CASES:
      parser.error(f"unknown case {case!r}; choose from {STEP_CASES + MORE_STEP_CASES}")
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    corpus = args.corpus
    if not corpus and "steps" in parts:
      sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                      "tests"))
      import own_corpus_data  # pylint: disable=import-outside-toplevel
      corpus = own_corpus_data.write_corpus(
          tmp, n_train=8 if args.tiny else 40, min_words=30 if args.tiny else 600,
          max_words=60 if args.tiny else 1200)["train"]
    if "ops" in parts:
      rows += op_rows(args.tiny, args.repeats, compare, shapes)
    if "steps" in parts:
      rows += step_rows(args.cases.split(","), args.tiny, args.repeats, corpus, args.batches,
                        compare)
  if args.out:
    harness.write_results(args.out, harness.run_meta(
        "experiments/attention_cpu.py", argv, platform=platform.platform()), rows)
  return rows


if __name__ == "__main__":
  main()
