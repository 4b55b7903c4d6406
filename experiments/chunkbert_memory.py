"""Compiled memory of ChunkBERT vs full-attention BERT (MiniLM-L6 architecture, random init).

XLA's own accounting of the compiled programs: ``jax.jit(f).lower(...).compile()
.memory_analysis()``; nothing is executed, so 4096-token full attention can be measured on a
laptop. ``temp`` is the scratch memory of activations and intermediates (what attention's
L x L matrices inflate), ``params`` the argument buffers. Two programs per model: a forward
pass (inference) and a training step's gradient of a scalar loss.

Usage:
  python experiments/chunkbert_memory.py [--batch 1] [--length 4096] [--out docs/...json]
"""
from __future__ import annotations

import argparse
import platform

import jax
import jax.numpy as jnp

from longtext_jax import fileio
from longtext_jax.encoders.bert import Bert
from longtext_jax.encoders.chunk_bert import ChunkBert
from longtext_jax.train import benchmark as harness

MINILM = dict(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12,
              intermediate_size=1536, hidden_dropout_rate=0.0, attention_dropout_rate=0.0)


def measure(module, length: int, batch: int) -> dict[str, dict[str, float]]:
  """Compiled memory (MiB) and compile time of ``module``'s forward and gradient programs
  for a [batch, length] batch of ids (abstract parameters: nothing is allocated)."""
  ids = jnp.ones((batch, length), jnp.int32)
  mask = jnp.ones((batch, length), jnp.bool_)
  params = jax.eval_shape(lambda: module.init(jax.random.key(0), ids, mask))

  def forward(p, i, m):
    return module.apply(p, i, m).pooled

  def grad(p, i, m):
    return jax.grad(lambda q: jnp.sum(module.apply(q, i, m).pooled ** 2))(p)

  out = {}
  for name, fn in (("forward", forward), ("train_grad", grad)):
    compiled, compile_s = harness.compile_fn(fn, (params, ids, mask))
    mem = harness.memory(compiled)
    out[name] = {"temp_MiB": mem["temp_bytes"] / 2**20,
                 "args_MiB": mem["argument_bytes"] / 2**20,
                 "output_MiB": mem["output_bytes"] / 2**20,
                 "compile_s": compile_s}
  return out


def main(argv=None):
  """Command line: see the module docstring."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--length", type=int, default=4096)
  parser.add_argument("--chunk", type=int, default=128)
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)
  models = {
      f"chunkbert_vectorized_{args.length}": (ChunkBert(**MINILM, chunk_size=args.chunk,
                                                        mode="vectorized", num_filters=128),
                                              args.length - 2),
      f"chunkbert_sequential_{args.length}": (ChunkBert(**MINILM, chunk_size=args.chunk,
                                                        mode="sequential", num_filters=128),
                                              args.length - 2),
      f"bert_full_{args.length}": (Bert(**MINILM, max_position_embeddings=args.length),
                                   args.length),
      "bert_full_512": (Bert(**MINILM, max_position_embeddings=512), 512),
  }
  # ChunkBERT gets L - 2 word pieces so that [CLS] + pieces + [SEP] fill exactly L positions.
  results = {"device": f"{jax.devices()[0].device_kind} ({platform.machine()}), jax "
                       f"{jax.__version__}", "batch": args.batch}
  for name, (module, length) in models.items():
    results[name] = measure(module, length, args.batch)
    harness.emit({"model": name, **results[name]})
  full = results[f"bert_full_{args.length}"]
  for name in models:
    for prog in ("forward", "train_grad"):
      results[name][prog]["temp_vs_full"] = (results[name][prog]["temp_MiB"]
                                             / full[prog]["temp_MiB"])
  print("| model | forward temp (MiB) | vs full | train grad temp (MiB) | vs full |")
  print("|---|---|---|---|---|")
  for name in models:
    f, g = results[name]["forward"], results[name]["train_grad"]
    print(f"| {name} | {f['temp_MiB']:.1f} | {f['temp_vs_full']:.3f} | {g['temp_MiB']:.1f} "
          f"| {g['temp_vs_full']:.3f} |")
  if args.out:
    fileio.write_json_atomic(args.out, results)


if __name__ == "__main__":
  main()
