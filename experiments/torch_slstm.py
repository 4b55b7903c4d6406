"""S-LSTM forward and forward+backward: this project's JAX module against PyTorch on one CPU.

The PyTorch module below is written here from the equations of longtext_jax/encoders/slstm.py
(paper Eq. 1-2, default options: sync update, gate LayerNorms before the sigmoid, sinusoidal
positions, embedding LayerNorm, no dropout) and reads the same parameters (copied from the
Flax tree, so both compute the same function: ``--check`` asserts it to 1e-4 at a tiny
size before timing). torch is a test-only dependency (setup.cfg extra ``oracle``).

Timing: both frameworks alternate call by call (best of ``--repeats``), wall and process CPU
time; torch uses its default intra-op threads, XLA its own.

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
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from longtext_jax.encoders.slstm import SLSTM, sinusoidal_positions  # pylint: disable=g-import-not-at-top,wrong-import-position


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


def time_against_torch(enc, params, x, tm: torch.nn.Module, repeats: int) -> dict:
  """Forward (pooled) and forward+backward (mean(sequence^2) + mean(pooled^2), every
  parameter) of the Flax encoder ``enc`` and its PyTorch counterpart ``tm`` on ``x`` with
  no padding, alternated call by call: best wall and CPU seconds of each, and versions."""
  mask = jnp.ones(x.shape[:2], bool)
  fwd = jax.jit(lambda p, x, m: enc.apply(p, x, m).pooled)

  def loss(p, x, m):
    out = enc.apply(p, x, m)
    return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)

  grad = jax.jit(jax.grad(loss))
  tx, tmask = torch.tensor(np.asarray(x)), torch.tensor(np.asarray(mask))

  def torch_fwd():
    with torch.no_grad():
      tm(tx, tmask)[1].sum().item()

  def torch_grad():
    tm.zero_grad(set_to_none=True)
    h, g = tm(tx, tmask)
    ((h ** 2).mean() + (g ** 2).mean()).backward()

  best = time_pair({
      "jax_fwd": lambda: jax.block_until_ready(fwd(params, x, mask)),
      "torch_fwd": torch_fwd,
      "jax_fwd_bwd": lambda: jax.block_until_ready(grad(params, x, mask)),
      "torch_fwd_bwd": torch_grad}, repeats)
  return {**{f"{k}_wall_s": v[0] for k, v in best.items()},
          **{f"{k}_cpu_s": v[1] for k, v in best.items()},
          "jax": jax.__version__, "torch": torch.__version__,
          "torch_threads": torch.get_num_threads()}


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
  args = p.parse_args(argv)

  def build(d, length, batch):
    enc = SLSTM(num_steps=args.steps, position="sinusoidal", max_len=length)
    x = jax.random.normal(jax.random.key(0), (batch, length, d), jnp.float32)
    mask = jnp.arange(length)[None] < jnp.maximum(length - jnp.arange(batch)[:, None], 1)
    params = jax.jit(enc.init)(jax.random.key(1), x, mask)
    params = jax.tree.map(lambda v: v + 0.1 * jnp.cos(jnp.arange(v.size).reshape(v.shape)),
                          flax_unbox(params))
    return enc, x, mask, params

  enc, x, mask, params = build(16, 9, 2)
  ours = enc.apply(params, x, mask)
  tm = TorchSLSTM(params["params"], args.steps)
  th, tg = tm(torch.tensor(np.asarray(x)), torch.tensor(np.asarray(mask)))
  np.testing.assert_allclose(th.detach().numpy(), ours.sequence, atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(tg.detach().numpy(), ours.pooled, atol=1e-4, rtol=1e-4)
  print("check: the PyTorch S-LSTM equals the JAX one (1e-4)")
  if args.check:
    return 0

  for length in (int(v) for v in args.lengths.split(",")):
    enc, x, _, params = build(args.d_model, length, args.batch)
    row = {"length": length, "d_model": args.d_model, "batch": args.batch,
           **time_against_torch(enc, params, x, TorchSLSTM(params["params"], args.steps),
                                args.repeats)}
    emit(row, args.out)
  return 0


def flax_unbox(tree):
  """Plain arrays from a possibly logically-partitioned Flax tree."""
  import flax  # pylint: disable=g-import-not-at-top
  return flax.core.meta.unbox(tree)


if __name__ == "__main__":
  sys.exit(main())
