"""Window-size study (RAN paper Sec. 4.5.1, Fig. 5): accuracy and time per epoch vs W.

Trains RAN on the generated ``last_window`` task (``longtext_jax.data.long_tasks``: the label
is the class of a marker in the document's last ``--marker_window`` tokens) for each window
size, and records eval accuracy and the training time of one epoch (compilation excluded).
The paper sees a V-shaped time curve: small windows mean many sequential recurrent steps,
large windows quadratic attention.

Usage (CPU, minutes):
  python experiments/ran_window_study.py --windows=32,64,128,256,512,1024 --seq_len=2048 \
      --epochs=2 --out=/tmp/ran_windows.json --plot=docs/ran_window_study.png
  # Redraw the recorded figure (no training):
  python experiments/ran_window_study.py --replot=docs/ran_window_study_cpu.json \
      --plot=docs/ran_window_study.png
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np
import optax

from longtext_jax import fileio
from longtext_jax import tasks
from longtext_jax.config import base_config, encoder_config
from longtext_jax.data import long_tasks
from longtext_jax.model import build_model
from longtext_jax.train import benchmark as harness
from longtext_jax.train import loop


def run(window, args, data):
  """Trains RAN with window size ``window``; returns accuracy, s/epoch and compile time."""
  c = base_config()
  c.task.name, c.task.num_classes = "classification", args.num_classes
  c.model.vocab_size = c.task.vocab_size = args.vocab_size
  c.model.d_model = args.d_model
  c.model.encoder = encoder_config("ran", num_layers=args.layers, num_heads=args.heads,
                                   window_size=window, impl=args.impl, dropout_rate=0.0)
  model = build_model(c)
  train, evals = data
  params = jax.jit(model.init)(jax.random.PRNGKey(0),
                               {k: v[:2] for k, v in train.items()})["params"]
  # The trainer's step (loss = the task's mean cross-entropy), plain Adam.
  tx = optax.adam(args.lr)
  step = jax.jit(loop.make_train_step(model, tasks.get_task(c.task), tx))
  state = loop.init_from_params(params, tx)
  rng = jax.random.PRNGKey(0)

  n = train["label"].shape[0]
  bs = args.batch_size
  batches = [{k: v[s:s + bs] for k, v in train.items()} for s in range(0, n - bs + 1, bs)]
  step, compile_s = harness.compile_fn(step, (state, batches[0], rng))
  epoch_times = []
  for _ in range(args.epochs):
    t0 = time.perf_counter()
    for b in batches:
      state, metrics = step(state, b, rng)
    jax.block_until_ready(state)
    epoch_times.append(time.perf_counter() - t0)
  params, loss = state.params, metrics["loss"]
  predict = jax.jit(lambda p, b: model.apply({"params": p}, b)["logits"])
  preds = np.concatenate([np.argmax(predict(params, {k: v[s:s + bs] for k, v in evals.items()}),
                                    -1) for s in range(0, evals["label"].shape[0], bs)])
  acc = float(np.mean(preds == evals["label"][:preds.shape[0]]))
  return dict(window=window, accuracy=acc, epoch_s=float(np.median(epoch_times)),
              compile_s=compile_s, final_loss=float(loss))


def main(argv=None):
  """Command line: see the module docstring."""
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--windows", default="32,64,128,256,512,1024")
  ap.add_argument("--seq_len", type=int, default=2048)
  ap.add_argument("--marker_window", type=int, default=32)
  ap.add_argument("--num_train", type=int, default=512)
  ap.add_argument("--num_eval", type=int, default=256)
  ap.add_argument("--num_classes", type=int, default=4)
  ap.add_argument("--vocab_size", type=int, default=32)
  ap.add_argument("--d_model", type=int, default=32)
  ap.add_argument("--layers", type=int, default=1)
  ap.add_argument("--heads", type=int, default=2)
  ap.add_argument("--batch_size", type=int, default=16)
  ap.add_argument("--epochs", type=int, default=2)
  ap.add_argument("--lr", type=float, default=3e-3)
  ap.add_argument("--impl", default="parallel")
  ap.add_argument("--out", default="")
  ap.add_argument("--plot", default="")
  ap.add_argument("--replot", default="",
                  help="a recorded --out JSON: only redraw its figure into --plot")
  args = ap.parse_args(argv)
  if args.replot:
    with open(args.replot) as f:
      rec = json.load(f)
    plot(rec["rows"], rec["args"], args.plot or args.replot.replace(".json", ".png"))
    return
  gen = lambda num, seed: long_tasks.generate(
      "last_window", num, args.seq_len, args.seq_len // 2, args.marker_window,
      args.vocab_size, args.num_classes, seed)
  data = (gen(args.num_train, 1), gen(args.num_eval, 2))
  print(f"device: {jax.devices()[0].device_kind}, backend {jax.default_backend()}", flush=True)
  rows = []
  for w in [int(s) for s in args.windows.split(",")]:
    rows.append(run(w, args, data))
    print(json.dumps(rows[-1]), flush=True)
  print("\n| W | accuracy | s / epoch | compile s |\n|---|---|---|---|")
  for r in rows:
    print(f"| {r['window']} | {r['accuracy']:.3f} | {r['epoch_s']:.2f} | {r['compile_s']:.1f} |")
  if args.out:
    fileio.write_json_atomic(args.out, dict(args=vars(args), rows=rows))
  if args.plot:
    plot(rows, vars(args), args.plot)


def plot(rows, args, path):
  """Eval accuracy (left axis) and training time per epoch (right axis) against W.

  Args:
    rows: the measured rows (``rows`` of the ``--out`` JSON).
    args: the study's arguments (sequence length, epochs: the title).
    path: the PNG to write.
  """
  from matplotlib.figure import Figure
  from longtext_jax import plot as plot_lib
  acc_style, time_style = plot_lib.styles_for(["accuracy", "time"], fixed=False).values()
  fig = Figure(figsize=(5.5, 3.8), layout="constrained")
  ax = fig.subplots()
  ws = [r["window"] for r in rows]
  ax.plot(ws, [r["accuracy"] for r in rows], "-", label="eval accuracy", **acc_style)
  plot_lib.set_length_ticks(ax, ws)
  ax.set(xlabel="window size W (tokens)", ylabel="eval accuracy (fraction correct)",
         ylim=(0, 1.05))
  ax2 = ax.twinx()
  ax2.plot(ws, [r["epoch_s"] for r in rows], "--", label="time per epoch", **time_style)
  ax2.set_ylabel("training time per epoch (s)")
  if plot_lib.spans_decades([r["epoch_s"] for r in rows], ratio=10):
    ax2.set_yscale("log")
  ax.legend(handles=ax.lines + ax2.lines, fontsize=8, loc="lower left")
  ax.grid(True, alpha=0.3)
  fig.suptitle(f"RAN, last_window task, L={args.get('seq_len')}, "
               f"{args.get('epochs')} epochs", fontsize=9)
  fileio.save_figure_atomic(fig, path, dpi=110)


if __name__ == "__main__":
  main()
