"""Masked-summation study (Star-Transformer paper, Sec. 5.1, Fig. 3a/3b, Table 6).

Sweeps the sequence length n for Star-Transformer (and its ablations without radial and
without ring connections), Transformer, LSTM and BiLSTM; trains each on the synthetic task
(k rows of an n x d input are marked; the target is the sum of their d-1 values) and writes
test MSE and test (inference) time against n to ``docs/``:

  docs/masked_summation.md            the tables, the command, the device
  docs/masked_summation_mse.png       Fig. 3a-style plot
  docs/masked_summation_time.png      Fig. 3b-style plot
  docs/masked_summation_results.json  raw numbers

Every model is built by ``longtext_jax.model.build_model`` from a config (task 'regression',
feature inputs), trained with Adam on MSE by the trainer's ``make_train_step``; the loop over
steps lives here so that inference time is measured the same way for every model
(jit-compiled, after a warm-up, whole test set).

Default: a reduced setting sized for ~30 minutes on a quiet 2-core CPU (400 steps, 2000/1000
examples, width 32, the Transformer only up to n=200). ``--full`` uses the
paper's 10k/10k/10k sets, H DIM 100 with 10 heads x 10 and longer training (GPU-sized).

  python experiments/masked_summation.py                 # reduced, ~30 min CPU
  python experiments/masked_summation.py --full          # the paper's sizes
  python experiments/masked_summation.py --lengths 50,200 --models star,transformer
  python experiments/masked_summation.py --replot        # redraw the PNGs from the JSON
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from longtext_jax import tasks  # noqa: E402
from longtext_jax.config import base_config, encoder_config  # noqa: E402
from longtext_jax.data import synthetic  # noqa: E402
from longtext_jax.model import build_model  # noqa: E402
from longtext_jax.train import loop  # noqa: E402

STAR = dict(name="star_transformer", num_cycles=2, dropout_rate=0.0, ends="ring",
            pooling="relay_plus_max")
MODELS = {
    "star": STAR,
    "star_no_radial": dict(STAR, radial=False),  # ablation (a): ring only, max-pool readout
    "star_no_ring": dict(STAR, ring=False),  # ablation (b): radial only
    # Not in the paper: residual + feed-forward blocks (the authors' advice for stability).
    "star_ffn": dict(STAR, ffn_residual=True),
    "transformer": dict(name="transformer", num_layers=2, dropout_rate=0.0,
                        position="learned", pooling="mean"),
    "lstm": dict(name="lstm", num_layers=1, pooling="mean"),
    "bilstm": dict(name="bilstm", num_layers=1, pooling="mean"),
}
PAPER_N200 = {"star": 0.0284, "star_no_radial": 0.1536, "star_no_ring": 0.0359}


@dataclasses.dataclass
class Setting:
  num_train: int = 2000
  num_dev: int = 0  # >0: keep the parameters with the best dev MSE (checked each epoch).
  num_test: int = 1000
  steps: int = 400
  batch_size: int = 32
  d_model: int = 32
  num_heads: int = 4
  learning_rate: float = 2e-3
  k: int = 10
  d: int = 10
  eval_batch_size: int = 250


REDUCED = Setting()
FULL = Setting(num_train=10_000, num_dev=10_000, num_test=10_000, steps=15_000,
               batch_size=64, d_model=100, num_heads=10, learning_rate=1e-3)


def make_config(model: str, n: int, s: Setting):
  """The experiment config of one run (task regression on feature inputs)."""
  c = base_config()
  c.task.name = "regression"
  c.task.num_outputs = s.d - 1
  c.data.seq_len, c.data.num_masked, c.data.feature_dim = n, s.k, s.d
  c.model.input = "features"
  c.model.d_model = s.d_model
  enc = dict(MODELS[model])
  name = enc.pop("name")
  if name in ("star_transformer", "transformer"):
    enc.update(num_heads=s.num_heads, max_len=max(n, 8))
  c.model.encoder = encoder_config(name, **enc)
  return c


def _data(n, count, s: Setting, seed):
  return synthetic.masked_summation(count, n, s.k, s.d, seed=seed)


def run_one(model: str, n: int, s: Setting, seed: int = 0, log=None) -> dict:
  """Trains one model at length n; returns test MSE, inference time and sizes."""
  config = make_config(model, n, s)
  net = build_model(config)
  task = tasks.get_task(config.task)
  train = _data(n, s.num_train, s, seed=1000 * seed + 1)
  dev = _data(n, s.num_dev, s, seed=1000 * seed + 2) if s.num_dev else None
  test = _data(n, s.num_test, s, seed=1000 * seed + 3)
  rng = np.random.default_rng(seed)
  take = lambda arrays, idx: {k: v[idx] for k, v in arrays.items()}
  params = jax.jit(net.init)(jax.random.key(seed), take(train, np.arange(2)))["params"]
  # Data-dependent init, the same for every model: the output bias starts at the mean
  # training target (~k/2), so Adam does not spend thousands of steps walking it there.
  params["head"]["out"]["bias"] = jnp.asarray(train["target"].mean(0))
  schedule = optax.warmup_cosine_decay_schedule(0.0, s.learning_rate,
                                                min(100, s.steps // 10), s.steps)
  opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule))
  train_step = jax.jit(loop.make_train_step(net, task, opt, schedule))
  dropout_rng = jax.random.key(seed)

  predict = jax.jit(lambda p, b: net.apply({"params": p}, b)["predictions"])

  def evaluate(params, arrays):
    se, count = 0.0, 0
    for i in range(0, len(arrays["target"]), s.eval_batch_size):
      batch = take(arrays, slice(i, i + s.eval_batch_size))
      pred = np.asarray(predict(params, batch))
      se += float(np.sum(np.mean((pred - batch["target"]) ** 2, -1)))
      count += len(pred)
    return se / count

  state = loop.init_from_params(params, opt)
  steps_per_epoch = max(1, s.num_train // s.batch_size)
  best = (float("inf"), params)
  t0 = time.perf_counter()
  order = rng.permutation(s.num_train)
  for step in range(s.steps):
    e, i = divmod(step, steps_per_epoch)
    if i == 0 and e:
      order = rng.permutation(s.num_train)
    idx = order[i * s.batch_size:(i + 1) * s.batch_size]
    state, metrics = train_step(state, take(train, idx), dropout_rng)
    params = state.params
    if dev is not None and (i == steps_per_epoch - 1 or step == s.steps - 1):
      dev_mse = evaluate(params, dev)
      if dev_mse < best[0]:
        best = (dev_mse, params)
    if log and step % 200 == 0:
      log(f"  {model} n={n} step {step} train loss {float(metrics['loss']):.4f}")
  jax.block_until_ready(params)
  train_time = time.perf_counter() - t0
  if dev is not None:
    params = best[1]
  evaluate(params, take(test, slice(0, s.eval_batch_size)))  # warm-up compile
  t0 = time.perf_counter()
  test_mse = evaluate(params, test)
  test_time = time.perf_counter() - t0
  num_params = sum(x.size for x in jax.tree.leaves(params))
  return {"model": model, "n": n, "test_mse": test_mse, "train_time_s": train_time,
          "test_time_ms_per_batch": 1000 * test_time / -(-s.num_test // s.eval_batch_size),
          "num_params": int(num_params), "dev_mse": best[0] if dev is not None else None}


def guess_mse(k: int) -> float:
  """MSE of always guessing the expectation k/2 (per output): Var(sum of k U[0,1)) = k/12."""
  return k / 12


def plot_results(results, s: Setting, out_dir):
  """Draws ``masked_summation_mse.png`` and ``masked_summation_time.png`` in ``out_dir``.

  One colour and marker per model (``longtext_jax.plot.MODEL_STYLES``); n and both
  n on a log axis, a measure on a log axis when it spans decades; a model missing at some n has a gap there.

  Args:
    results: the ``results`` of ``masked_summation_results.json``.
    s: the setting they were run with.
    out_dir: where the PNGs go.

  Returns:
    The two figures (MSE, time).
  """
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  from longtext_jax import plot as plot_lib  # pylint: disable=g-import-not-at-top
  models = [m for m in MODELS if any(r["model"] == m for r in results)]
  lengths = sorted({r["n"] for r in results})
  styles = plot_lib.styles_for(models)
  figs = []
  for key, fname, ylabel in (("test_mse", "masked_summation_mse.png",
                              "test MSE (mean squared error)"),
                             ("test_time_ms_per_batch", "masked_summation_time.png",
                              f"test time per batch of {s.eval_batch_size} (ms)")):
    fig = Figure(figsize=(5.2, 3.8), layout="constrained")
    ax = fig.subplots()
    for m in models:
      pts = sorted((r["n"], r[key]) for r in results if r["model"] == m)
      ax.plot(*zip(*pts), label=m, **styles[m])
    if key == "test_mse":
      ax.axhline(guess_mse(s.k), ls="--", c="gray", label="k/2 guess")
    plot_lib.set_length_ticks(ax, lengths)
    if plot_lib.spans_decades([r[key] for r in results]):
      ax.set_yscale("log")
    ax.set_xlabel("sequence length n (rows)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.savefig(os.path.join(out_dir, fname), dpi=110)
    figs.append(fig)
  return figs


def write_docs(results, s: Setting, commands, out_dir, wall_s):
  """Writes the tables, plots and raw numbers; ``commands``: the argv lists that ran."""
  os.makedirs(out_dir, exist_ok=True)
  models = [m for m in MODELS if any(r["model"] == m for r in results)]
  lengths = sorted({r["n"] for r in results})
  get = lambda m, n, key: next((r[key] for r in results if r["model"] == m and r["n"] == n),
                               None)
  with open(os.path.join(out_dir, "masked_summation_results.json"), "w") as f:
    json.dump({"setting": dataclasses.asdict(s), "results": results,
               "commands": commands, "wall_s": wall_s}, f, indent=1)
  plot_results(results, s, out_dir)
  def table(key, fmt):  # Markdown rows: one per model, one column per n ('-': not run).
    out = ["| model | " + " | ".join(f"n={n}" for n in lengths) + " |",
           "|---|" + "---|" * len(lengths)]
    for m in models:
      cells = [get(m, n, key) for n in lengths]
      out.append(f"| {m} | " + " | ".join("-" if c is None else format(c, fmt)
                                         for c in cells) + " |")
    return out

  cmds = "; ".join(f"`{('python experiments/masked_summation.py ' + ' '.join(c)).strip()}`"
                   for c in commands)
  lines = [
      "# Masked summation (Star-Transformer paper, Sec. 5.1)", "",
      "Generated by `experiments/masked_summation.py`; rerun to refresh.", "",
      f"- Command(s): {cmds}",
      f"- Device: {jax.devices()[0].platform.upper()} ({os.cpu_count()} cores visible, "
      f"{platform.processor() or platform.machine()}), no GPU; jax {jax.__version__}; "
      f"total wall time {wall_s / 60:.1f} min.",
      f"- Setting: k={s.k}, d={s.d}; train/dev/test = {s.num_train}/{s.num_dev}/"
      f"{s.num_test}; {s.steps} Adam steps of batch {s.batch_size}, peak lr "
      f"{s.learning_rate}; width {s.d_model}, {s.num_heads} heads; Star: 2 cycles, ring ends, "
      "readout relay + max-pool; Transformer: 2 pre-LN layers, learned positions, mean "
      "pool; (Bi)LSTM: 1 layer, mean pool.",
      f"- The k/2 guess has MSE k/12 = {guess_mse(s.k):.3f}.", "",
      "## Test MSE", "", *table("test_mse", ".4f")]
  lines += ["", "'-': not run within the CPU budget (the Transformer stops at "
            "`--transformer_max_n`; see the commands for which models ran at which n).", "",
            "Paper, n=200 (10k/10k/10k, Table 6): " + ", ".join(
      f"{m} {v}" for m, v in PAPER_N200.items()) + ".", "",
            f"## Test time (ms per batch of {s.eval_batch_size}, jit, after warm-up)", "",
            *table("test_time_ms_per_batch", ".1f")]
  lines += ["", "![test MSE](masked_summation_mse.png) "
            "![test time](masked_summation_time.png)", ""]
  with open(os.path.join(out_dir, "masked_summation.md"), "w") as f:
    f.write("\n".join(lines))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--full", action="store_true", help="the paper's 10k/10k/10k sizes")
  parser.add_argument("--lengths", default="50,100,200,400,800")
  parser.add_argument("--models", default=",".join(m for m in MODELS if m != "star_ffn"))
  parser.add_argument("--steps", type=int, default=0, help="override training steps")
  parser.add_argument("--num_train", type=int, default=0, help="override training size")
  parser.add_argument("--out_dir", default=os.path.join(os.path.dirname(__file__), "..",
                                                         "docs"))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--replot", action="store_true",
                      help="only redraw the two PNGs from OUT_DIR/masked_summation_results.json")
  parser.add_argument("--append", action="store_true",
                      help="keep the runs already in masked_summation_results.json (same "
                           "setting), replacing those of the same model and n")
  parser.add_argument("--transformer_max_n", type=int, default=-1,
                      help="skip the Transformer above this n (default: 200 reduced, no "
                           "limit with --full); its O(n^2) CPU steps dominate the budget")
  args = parser.parse_args(argv)
  if args.replot:
    with open(os.path.join(args.out_dir, "masked_summation_results.json")) as f:
      saved = json.load(f)
    plot_results(saved["results"], Setting(**saved["setting"]), args.out_dir)
    return saved["results"]
  if args.transformer_max_n < 0:
    args.transformer_max_n = 10**9 if args.full else 200
  s = dataclasses.replace(FULL if args.full else REDUCED)
  if args.steps:
    s.steps = args.steps
  if args.num_train:
    s.num_train = args.num_train
  models = args.models.split(",")
  unknown = set(models) - set(MODELS)
  if unknown:
    raise ValueError(f"unknown models {sorted(unknown)}; choose from {sorted(MODELS)}")
  results, commands, wall_before = [], [], 0.0
  argv = sys.argv[1:] if argv is None else list(argv)
  if args.append:
    path = os.path.join(args.out_dir, "masked_summation_results.json")
    with open(path) as f:
      saved = json.load(f)
    if saved["setting"] != dataclasses.asdict(s):
      raise ValueError(f"--append: {path} was written with another setting")
    results, commands = saved["results"], saved.get("commands", [])
    wall_before = saved.get("wall_s", 0.0)
  commands.append(argv)
  t0 = time.perf_counter()
  for n in [int(x) for x in args.lengths.split(",")]:
    for m in models:
      if m == "transformer" and n > args.transformer_max_n:
        continue
      r = run_one(m, n, s, seed=args.seed, log=lambda msg: print(msg, flush=True))
      print(json.dumps(r), flush=True)
      results = [x for x in results if (x["model"], x["n"]) != (m, n)] + [r]
      write_docs(results, s, commands, args.out_dir,
                 wall_before + time.perf_counter() - t0)
  return results


if __name__ == "__main__":
  main()
