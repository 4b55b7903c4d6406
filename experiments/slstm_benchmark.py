"""S-LSTM vs full-attention Transformer: time and compiled memory against sequence length.

Compares, in one run on one device,
  * ``slstm``: S-LSTM with ``--steps`` recurrent steps (one shared parameter set), width D;
  * ``tf_same_depth``: Transformer with ``--steps`` layers and width D (same width and depth);
  * ``tf_same_params``: Transformer of width D with the number of layers whose parameter count
    is closest to the S-LSTM's (the S-LSTM shares its step parameters, so it is much smaller
    than the same-depth Transformer).
For each length it reports inference time (jit forward), forward+backward time (jit grad with
respect to the parameters), the compiled temporary memory from
``jax.jit(f).lower(...).compile().memory_analysis()`` and the S-LSTM speed-up ratios. Timings
are the best of ``--repeats`` runs after one warm-up, all models of one length timed in
round-robin order; a configuration whose compiled temporary memory exceeds ``--max_temp_gib``
is compiled (memory reported) but not run.

  PYTHONPATH=. python experiments/slstm_benchmark.py --d_model 128 --steps 4 \
      --lengths 64,256,1024,4096,16384 --out docs/slstm_benchmark_cpu.json
"""
from __future__ import annotations

import argparse
import platform

import jax
import jax.numpy as jnp
import numpy as np

from longtext_jax import fileio
from longtext_jax.encoders import SLSTM, Transformer
from longtext_jax.train import benchmark as harness


def param_count(model, x, mask) -> int:
  """Number of parameters of ``model`` for inputs shaped like ``x`` [B, L, D]."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x, mask)
  return sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(shapes["params"]))


def make_models(d_model: int, steps: int, heads: int, length_probe: int = 16):
  """(models by name, their parameter counts, tf_same_params's number of layers)."""
  x = jnp.zeros((1, length_probe, d_model))
  mask = jnp.ones((1, length_probe), bool)
  slstm = SLSTM(num_steps=steps, position="sinusoidal", dropout_rate=0.0)
  tf = lambda layers: Transformer(num_layers=layers, num_heads=heads, dropout_rate=0.0,
                                  position="rotary", attention_impl="xla")
  n_slstm = param_count(slstm, x, mask)
  per_layer = param_count(tf(2), x, mask) - param_count(tf(1), x, mask)
  base = param_count(tf(1), x, mask) - per_layer
  layers = max(1, int(round((n_slstm - base) / per_layer)))
  models = {"slstm": slstm, "tf_same_depth": tf(steps), "tf_same_params": tf(layers)}
  counts = {k: param_count(m, x, mask) for k, m in models.items()}
  return models, counts, layers


def compile_one(model, length: int, batch: int, d_model: int, max_temp_gib: float):
  """Compiled inference and forward+backward functions, their inputs and compiled memory."""
  rng = jax.random.PRNGKey(0)
  x = jax.random.normal(rng, (batch, length, d_model), jnp.float32)
  mask = jnp.ones((batch, length), bool)
  params = jax.jit(model.init)(rng, x, mask)

  def forward(p, x, m):
    out = model.apply(p, x, m)
    return out.sequence, out.pooled

  def loss(p, x, m):
    out = model.apply(p, x, m)
    return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)

  fns, info = {}, {}
  for name, fn in (("infer", forward), ("train", jax.grad(loss))):
    compiled, _ = harness.compile_fn(fn, (params, x, mask))
    temp = harness.memory(compiled)["temp_bytes"]
    info[f"{name}_temp_mib"] = None if temp is None else temp / 2**20
    if temp is None or temp <= max_temp_gib * 2**30:
      fns[name] = compiled
    else:
      info[f"{name}_s"] = None  # too big to run here
  return fns, (params, x, mask), info


def main(argv=None):
  """Command line: see the module docstring."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--d_model", type=int, default=128)
  parser.add_argument("--steps", type=int, default=4, help="S-LSTM steps = Transformer depth")
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--lengths", default="64,256,1024,4096,16384")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--max_temp_gib", type=float, default=3.0)
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)

  models, counts, layers = make_models(args.d_model, args.steps, args.heads)
  device = jax.devices()[0]
  header = (f"device: {device.platform} ({device.device_kind}), {platform.processor() or '?'}; "
            f"jax {jax.__version__}; D={args.d_model}, S-LSTM steps={args.steps}, heads="
            f"{args.heads}, batch={args.batch}; params: " +
            ", ".join(f"{k}={v:,}" for k, v in counts.items()) +
            f" (tf_same_params has {layers} layers)")
  print(header, flush=True)
  rows = []
  for length in [int(v) for v in args.lengths.split(",")]:
    row = {"length": length}
    entries = {}
    for name, model in models.items():
      fns, inputs, info = compile_one(model, length, args.batch, args.d_model,
                                      args.max_temp_gib)
      row.update({f"{name}_{k}": v for k, v in info.items()})
      entries.update({f"{name}_{kind}_s": (fn, inputs) for kind, fn in fns.items()})
    # Best of --repeats, the models of one length in round-robin order.
    row.update(harness.time_interleaved(entries, args.repeats, reduce="min")[0])
    harness.emit(row)
    rows.append(row)

  fmt_t = lambda v: "skipped" if v is None else f"{v * 1e3:.1f}"
  fmt_m = lambda v: "?" if v is None else f"{v:.0f}"
  ratio = lambda a, b: "-" if a is None or b is None else f"{b / a:.2f}x"
  print("\n| L | S-LSTM infer ms | TF same depth | TF same params | speed-up vs same depth / "
        "same params | S-LSTM fwd+bwd ms | TF same depth | TF same params | speed-up | "
        "temp MiB fwd+bwd S-LSTM / TF same depth / TF same params |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['length']} | {fmt_t(r['slstm_infer_s'])} | {fmt_t(r['tf_same_depth_infer_s'])}"
          f" | {fmt_t(r['tf_same_params_infer_s'])} | "
          f"{ratio(r['slstm_infer_s'], r['tf_same_depth_infer_s'])} / "
          f"{ratio(r['slstm_infer_s'], r['tf_same_params_infer_s'])} | "
          f"{fmt_t(r['slstm_train_s'])} | {fmt_t(r['tf_same_depth_train_s'])} | "
          f"{fmt_t(r['tf_same_params_train_s'])} | "
          f"{ratio(r['slstm_train_s'], r['tf_same_depth_train_s'])} / "
          f"{ratio(r['slstm_train_s'], r['tf_same_params_train_s'])} | "
          f"{fmt_m(r['slstm_train_temp_mib'])} / {fmt_m(r['tf_same_depth_train_temp_mib'])} / "
          f"{fmt_m(r['tf_same_params_train_temp_mib'])} |")
  if args.out:
    fileio.write_json_atomic(
        args.out, {"header": header, "args": vars(args), "params": counts, "rows": rows})


if __name__ == "__main__":
  main()
