"""GRN paper Table 4: inference time of the S-LSTM against a Transformer of about its size.

The GRN paper times inference (seconds per sequence) at 64-512 tokens: its S-LSTM with 6
recurrent steps and hidden size 1280 (107M parameters with the embedding) is 2.6x faster
than RoBERTa-base (12 layers, D=768, 125M) at 256 tokens and 4.6x at 512 (GPU). Here:

  slstm_1280x6     S-LSTM, D=1280, 6 steps (shared parameters), the authors' switches of
                   configs/slstm/official.py ('slstm1792_ln_posinput': gate LayerNorms,
                   positions at the input); the paper's "6 layers, 1280 hidden size"
  roberta_base     a Transformer shaped like RoBERTa-base: 12 layers, D=768, 12 heads,
                   MLP 3072, learned positions

Encoders only (the 30k-piece embedding and heads are the same lookup for both and are left
out), batch 1, float32, jit forward, timed by the benchmark harness round-robin (so a change
of machine load hits both alike): median of ``--repeats`` after a warm-up.

  python experiments/grn_speed.py                              # 128,256,512 on this device
  python experiments/grn_speed.py --tiny   # seconds (tests; runs/grn_speed_tiny.json)
"""
from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from configs.slstm import official as slstm_official  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import fileio  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import model as model_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.config import encoder_config  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import benchmark as harness  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PAPER = {  # Table 4 (seconds): S-LSTM 6 steps x 1280 and RoBERTa-base.
    "slstm_1280x6": {64: 0.010, 256: 0.010, 384: 0.010, 512: 0.011},
    "roberta_base": {64: 0.017, 256: 0.026, 384: 0.042, 512: 0.051}}


def encoders(tiny: bool, max_len: int):
  """name -> (encoder module, width D)."""
  slstm = slstm_official.get_config("slstm1792_ln_posinput").model.encoder
  slstm.num_steps, slstm.max_len, slstm.dtype = (2 if tiny else 6), max_len, "float32"
  tf = encoder_config("transformer", num_layers=2 if tiny else 12, num_heads=2 if tiny else 12,
                      mlp_dim=64 if tiny else 3072, dropout_rate=0.0, position="learned",
                      max_len=max_len, pooling="mean")
  return {"slstm_1280x6": (model_lib.build_encoder(slstm), 32 if tiny else 1280),
          "roberta_base": (model_lib.build_encoder(tf), 32 if tiny else 768)}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--lengths", default="128,256,512")
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--tiny", action="store_true", help="small widths (tests)")
  parser.add_argument("--out", default=None,
                      help="results file (default docs/reproduction/grn_speed_cpu.json; with "
                           "--tiny runs/grn_speed_tiny.json: tiny timings never replace the "
                           "recorded ones unless told to)")
  args = parser.parse_args(argv)
  args.out = args.out or (os.path.join(ROOT, "runs", "grn_speed_tiny.json") if args.tiny else
                          os.path.join(ROOT, "docs", "reproduction", "grn_speed_cpu.json"))
  lengths = [int(x) for x in args.lengths.split(",")]
  models = encoders(args.tiny, max(lengths))
  rows = []
  for length in lengths:
    entries, info = {}, {}
    for name, (enc, width) in models.items():
      x = jax.random.normal(jax.random.key(0), (args.batch, length, width), jnp.float32)
      mask = jnp.ones((args.batch, length), bool)
      params = jax.jit(enc.init)(jax.random.key(1), x, mask)
      fn, _ = harness.compile_fn(lambda p, x, m, enc=enc: enc.apply(p, x, m).sequence,
                                 (params, x, mask))
      entries[name] = (fn, (params, x, mask))
      info[name] = int(sum(np.size(a) for a in jax.tree.leaves(params)))
    seconds, _ = harness.time_interleaved(entries, repeats=args.repeats, warmup=1)
    for name in models:
      row = {"model": name, "length": length, "batch": args.batch, "time_s": seconds[name],
             "speedup_vs_roberta": seconds["roberta_base"] / seconds[name],
             "encoder_params": info[name], "paper_s": PAPER[name].get(length),
             "device": f"{jax.devices()[0].platform} ({os.cpu_count()} cores)",
             "jax": jax.__version__, "host": harness.host(), "allocator": harness.allocator()}
      harness.emit(row)
      rows.append(row)
  fileio.write_json_atomic(args.out, {
      "command": "python experiments/grn_speed.py " + " ".join(
          sys.argv[1:] if argv is None else argv), "rows": rows})
  return rows


if __name__ == "__main__":
  main()
