"""S-LSTM forward and forward+backward: this project's JAX module against PyTorch on one CPU.

The PyTorch module below is written here from the equations of longtext_jax/encoders/slstm.py
(paper Eq. 1-2, default options: sync update, gate LayerNorms before the sigmoid, sinusoidal
positions, embedding LayerNorm, no dropout) and reads the same parameters (copied from the
Flax tree, so both compute the same function: ``--check`` asserts it to 1e-4 at a tiny
size before timing). torch is a test-only dependency (setup.cfg extra ``oracle``).

Timing: each framework in a process of its own (``--framework=jax|torch`` workers), the two
alternated ``--rounds`` times, best of ``--repeats`` calls in each; wall and process CPU
time; torch uses its default intra-op threads, XLA its own. ``--timing=interleaved`` times
both in one process, call by call, where the two thread pools can meet (with
OMP_WAIT_POLICY=ACTIVE, PyTorch's OpenMP threads spinning between calls, the JAX
Star-Transformer's forward+backward at D=256, batch 8, L=512 took 1.8x the CPU time it takes
in a process of its own; with the defaults the two timings agreed within 4%:
docs/benchmarks.md, "PyTorch comparison").

  python experiments/torch_slstm.py --d_model=256 --batch=8 --lengths=128,512,2048 \
      --steps=2 --repeats=3 --out=docs/benchmarks/torch_slstm_cpu.jsonl

Run it with the machine to itself: under load PyTorch's intra-op threads lose far more than
XLA's (at load average 8-10 PyTorch's forward+backward took 1.6-2.2x its quiet-machine CPU
time, JAX's 1.05-1.13x), which flatters JAX.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from longtext_jax.encoders.slstm import SLSTM, sinusoidal_positions  # pylint: disable=g-import-not-at-top,wrong-import-position
from longtext_jax.train import benchmark as harness  # pylint: disable=wrong-import-position


def _ln(z: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5):
  return torch.nn.functional.layer_norm(z, z.shape[-1:], None, None, eps) * scale + bias


def _neighbours(x: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
  left, right = torch.zeros_like(x), torch.zeros_like(x)
  for s in range(1, min(window, x.shape[1] - 1) + 1):
    pad = torch.zeros_like(x[:, :s])
    left = left + torch.cat([pad, x[:, :-s]], dim=1)
    right = right + torch.cat([x[:, s:], pad], dim=1)
  return left, right


def torch_parameters(tree: dict) -> torch.nn.ParameterDict:
  """A Flax parameter tree as a flat ParameterDict: 'a/b/kernel' becomes 'a__b__kernel'
  (ParameterDict keys cannot hold dots); the arrays are copied."""
  flat = {}

  def walk(sub, prefix):
    for k, v in sub.items():
      if isinstance(v, dict):
        walk(v, prefix + k + "__")
      else:
        flat[prefix + k] = torch.nn.Parameter(torch.tensor(np.asarray(v)))

  walk(tree, "")
  return torch.nn.ParameterDict(flat)


class TorchSLSTM(torch.nn.Module):
  """The S-LSTM of longtext_jax (default options) in PyTorch, parameters from a Flax tree."""

  def __init__(self, params: dict, num_steps: int, window: int = 1):
    super().__init__()
    self.num_steps, self.window = num_steps, window
    self.p = torch_parameters(params)

  def _w(self, name: str) -> torch.Tensor:
    return self.p[name.replace(".", "__")]

  def forward(self, x: torch.Tensor, mask: torch.Tensor):
    w = self._w
    b, length, d = x.shape
    m = mask[..., None].to(x.dtype)
    x = x + torch.tensor(sinusoidal_positions(length, d))[None]
    x = _ln(x, w("embed_ln.scale"), w("embed_ln.bias")) * m
    ux = torch.einsum("bld,dqe->blqe", x, w("input_u.kernel"))
    count = m.sum(1).clamp(min=1)
    g = (x * m).sum(1) / count
    h, c, cg = x, x, g
    for _ in range(self.num_steps):
      hl, hr = _neighbours(h, self.window)
      cl, cr = _neighbours(c, self.window)
      xi = torch.cat([hl, h, hr], dim=-1)
      z = (torch.einsum("bli,iqe->blqe", xi, w("step.token_w.kernel")) + w("step.token_w.bias")
           + torch.einsum("bi,iqe->bqe", g, w("step.token_v.kernel"))[:, None] + ux)
      z = _ln(z, w("step.token_ln.scale"), w("step.token_ln.bias"))
      zi, zl, zr, zf, zs, zo, zu = z.unbind(-2)
      e = torch.stack([torch.exp(torch.sigmoid(q)) for q in (zi, zl, zr, zf, zs)])
      ig, lg, rg, fg_, sg = e / e.sum(0)
      new_c = lg * cl + fg_ * c + rg * cr + sg * cg[:, None] + ig * torch.tanh(zu)
      new_h = torch.sigmoid(zo) * torch.tanh(new_c)
      # Sentence node from the step t-1 states (sync).
      hbar = (h * m).sum(1) / count
      zf_t = (h @ w("step.sent_f_u.kernel") + w("step.sent_f_u.bias")
              + (g @ w("step.sent_f_w.kernel"))[:, None])
      f = torch.sigmoid(_ln(zf_t, w("step.sent_f_ln.scale"), w("step.sent_f_ln.bias")))
      zg = (torch.einsum("bi,iqe->bqe", g, w("step.sent_go_w.kernel")) + w("step.sent_go_w.bias")
            + torch.einsum("bi,iqe->bqe", hbar, w("step.sent_go_u.kernel")))
      go = torch.sigmoid(_ln(zg, w("step.sent_go_ln.scale"), w("step.sent_go_ln.bias")))
      fg, og = go[:, 0], go[:, 1]
      mx = torch.maximum(fg, torch.where(mask[..., None], f, fg[:, None]).amax(1)).detach()
      ef = torch.exp(f - mx[:, None]) * m
      eg = torch.exp(fg - mx)
      new_cg = (eg * cg + (ef * c).sum(1)) / (eg + ef.sum(1))
      g, cg = og * torch.tanh(new_cg), new_cg
      h, c = new_h * m, new_c * m
    return h * m, g


def time_pair(fns: dict, repeats: int) -> dict:
  """name -> (best wall s, best CPU s) of fns called alternately after one warm-up each."""
  for fn in fns.values():
    fn()
  best = {k: [float("inf"), float("inf")] for k in fns}
  for _ in range(repeats):
    for k, fn in fns.items():
      c0, w0 = time.process_time(), time.perf_counter()
      fn()
      best[k][0] = min(best[k][0], time.perf_counter() - w0)
      best[k][1] = min(best[k][1], time.process_time() - c0)
  return best


TIMINGS = ("separate", "interleaved")


def time_against_torch(enc, params, x, tm, repeats: int,
                       frameworks: tuple[str, ...] = ("jax", "torch")) -> dict:
  """Forward and forward+backward of ``mean(sequence^2) + mean(pooled^2)`` (every
  parameter) of the Flax encoder ``enc`` and/or its PyTorch counterpart (``tm``, a module
  or a zero-argument function building it; only called when "torch" is timed) on ``x``
  with no padding, the frameworks' calls alternated: best wall and CPU seconds of each."""
  mask = jnp.ones(x.shape[:2], bool)
  fns = {}
  if "jax" in frameworks:
    def loss(p, x, m):
      out = enc.apply(p, x, m)
      return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)

    # The forward computes both outputs, as PyTorch's eager forward does (a jitted forward
    # of ``pooled`` alone lets XLA drop the S-LSTM's last token update).
    fwd = jax.jit(loss)

    grad = jax.jit(jax.grad(loss))
    fns["jax_fwd"] = lambda: jax.block_until_ready(fwd(params, x, mask))
    fns["jax_fwd_bwd"] = lambda: jax.block_until_ready(grad(params, x, mask))
  if "torch" in frameworks:
    tm = tm if isinstance(tm, torch.nn.Module) else tm()
    tx, tmask = torch.tensor(np.asarray(x)), torch.tensor(np.asarray(mask))

    def torch_fwd():
      with torch.no_grad():
        tm(tx, tmask)[1].sum().item()

    def torch_grad():
      tm.zero_grad(set_to_none=True)
      h, g = tm(tx, tmask)
      ((h ** 2).mean() + (g ** 2).mean()).backward()

    fns["torch_fwd"], fns["torch_fwd_bwd"] = torch_fwd, torch_grad
  best = time_pair(fns, repeats)
  return {**{f"{k}_wall_s": v[0] for k, v in best.items()},
          **{f"{k}_cpu_s": v[1] for k, v in best.items()},
          "jax": jax.__version__, "torch": torch.__version__,
          "torch_threads": torch.get_num_threads()}


def time_in_separate_processes(script: str, argv: list[str], rounds: int) -> list[dict]:
  """Rows of ``script argv --framework=jax`` and ``... --framework=torch``, each run in a
  fresh process, the two alternated ``rounds`` times; per length the best of every time.

  One process per framework so that the two thread pools cannot meet: with PyTorch's
  OpenMP threads spinning between calls (OMP_WAIT_POLICY=ACTIVE) a JAX call timed right
  after a PyTorch call in the same process ran on busy cores and was charged their CPU
  time (1.8x); with the defaults the two timings agreed within 4% (docs/benchmarks.md,
  "PyTorch comparison"), but the separate timing leaves no such question.
  """
  merged: dict[int, dict] = {}
  for _ in range(rounds):
    for framework in ("jax", "torch"):
      proc = subprocess.run([sys.executable, script, *argv, f"--framework={framework}"],
                            capture_output=True, text=True, check=False)
      if proc.returncode:
        raise RuntimeError(f"{script} --framework={framework} failed:\n{proc.stderr[-2000:]}")
      for line in proc.stdout.splitlines():
        if not line.startswith("{"):
          continue
        row = json.loads(line)
        into = merged.setdefault(row["length"], {})
        for k, v in row.items():
          if k.endswith("_s") and k in into:
            into[k] = min(into[k], v)
          else:
            into[k] = v
  return [{**row, "timing": "separate processes, alternated", "rounds": rounds}
          for _, row in sorted(merged.items())]


def add_timing_args(p: argparse.ArgumentParser) -> None:
  """--timing / --rounds / --framework, shared by torch_slstm.py and torch_star.py."""
  p.add_argument("--timing", default="separate", choices=TIMINGS,
                 help="separate: each framework in its own process, alternated --rounds "
                      "times (the default; see time_in_separate_processes); interleaved: "
                      "both in this process, call by call")
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--framework", default="", choices=("", "jax", "torch"),
                 help="(internal) time only this framework and print its rows")


def run_timing(args, script: str, worker_argv: list[str], case, meta: dict) -> int:
  """The timing part of torch_slstm.py / torch_star.py for ``args`` (add_timing_args'
  flags, ``--lengths``, ``--repeats``, ``--out``): as a worker (``--framework``) print one
  framework's rows; else time both, in separate processes (``--timing=separate``, workers
  started as ``script worker_argv``) or interleaved in this one, and emit ``meta`` + row.

  ``case(length)`` returns ``(enc, params, x, make_torch)`` for one length.
  """
  lengths = [int(v) for v in args.lengths.split(",")]
  if args.framework:  # A worker of time_in_separate_processes.
    for length in lengths:
      enc, params, x, make_torch = case(length)
      print(json.dumps({"length": length, **time_against_torch(
          enc, params, x, make_torch, args.repeats, (args.framework,))}), flush=True)
    return 0
  if args.timing == "separate":
    worker = [*worker_argv, f"--lengths={args.lengths}", f"--repeats={args.repeats}"]
    for row in time_in_separate_processes(script, worker, args.rounds):
      emit({**meta, **row}, args.out)
    return 0
  for length in lengths:
    enc, params, x, make_torch = case(length)
    emit({**meta, "length": length, "timing": "interleaved in one process",
          **time_against_torch(enc, params, x, make_torch, args.repeats)}, args.out)
  return 0


def emit(row: dict, out: str) -> None:
  """Prints ``row`` as JSON and appends it to the JSONL file ``out`` (when given)."""
  print(json.dumps(row), flush=True)
  if out:
    with open(out, "a", encoding="utf-8") as f:
      f.write(json.dumps(row) + "\n")


def main(argv=None) -> int:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--d_model", type=int, default=256)
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--lengths", default="128,512,2048")
  p.add_argument("--steps", type=int, default=2)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--out", default="", help="append the rows to this JSONL file")
  p.add_argument("--check", action="store_true", help="only the tiny equality check")
  add_timing_args(p)
  args = p.parse_args(argv)

  def build(d, length, batch):
    enc = SLSTM(num_steps=args.steps, position="sinusoidal", max_len=length)
    return (enc, *random_case(enc, d, length, batch, shorter_by=1))

  def case(length):
    enc, x, _, params = build(args.d_model, length, args.batch)
    return enc, params, x, lambda: TorchSLSTM(params["params"], args.steps)

  meta = {"encoder": "slstm", "d_model": args.d_model, "batch": args.batch,
          "steps": args.steps, "device": jax.devices()[0].device_kind, "host": harness.host(),
          "allocator": harness.allocator()}
  worker = [f"--d_model={args.d_model}", f"--batch={args.batch}", f"--steps={args.steps}"]
  script = os.path.abspath(__file__)
  if args.framework:
    return run_timing(args, script, worker, case, meta)

  enc, x, mask, params = build(16, 9, 2)
  ours = jax.jit(enc.apply)(params, x, mask)
  tm = TorchSLSTM(params["params"], args.steps)
  th, tg = tm(torch.tensor(np.asarray(x)), torch.tensor(np.asarray(mask)))
  np.testing.assert_allclose(th.detach().numpy(), ours.sequence, atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(tg.detach().numpy(), ours.pooled, atol=1e-4, rtol=1e-4)
  print("check: the PyTorch S-LSTM equals the JAX one (1e-4)")
  if args.check:
    return 0
  return run_timing(args, script, worker, case, meta)


def random_case(enc, d_model: int, length: int, batch: int, shorter_by: int):
  """``(x, mask, params)`` for ``enc``: normal inputs [batch, length, d_model], row b
  ``shorter_by * b`` tokens shorter (at least 1), and parameters moved off their initial
  values (LayerNorm scale 1, biases 0) so that a wrong name or a transposed kernel cannot go
  unnoticed. One jitted call: eagerly, every op and parameter shape compiles on its own."""
  @jax.jit
  def make():
    x = jax.random.normal(jax.random.key(0), (batch, length, d_model), jnp.float32)
    mask = jnp.arange(length)[None] < jnp.maximum(
        length - shorter_by * jnp.arange(batch)[:, None], 1)
    params = flax_unbox(enc.init(jax.random.key(1), x, mask))
    params = jax.tree.map(lambda v: v + 0.1 * jnp.cos(jnp.arange(v.size).reshape(v.shape)),
                          params)
    return x, mask, params
  return make()


def flax_unbox(tree):
  """Plain arrays from a possibly logically-partitioned Flax tree."""
  import flax  # pylint: disable=g-import-not-at-top
  return flax.core.meta.unbox(tree)


if __name__ == "__main__":
  sys.exit(main())
