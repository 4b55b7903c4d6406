"""Star-Transformer forward and forward+backward: this project's JAX module against PyTorch.

The PyTorch module below is written here from the equations of
longtext_jax/encoders/star_transformer.py with its default options (the paper's ordering:
attention -> ReLU -> LayerNorm for satellites and relay; ring ends; learned positions;
relay + max pooling; one parameter set per cycle; no dropout) and reads the same parameters
(copied from the Flax tree), so both compute the same function: the equality is checked to
1e-4 on a padded batch before any timing (``--check`` stops there; tests/test_torch_oracles.py
runs it). torch is a test-only dependency (setup.cfg extra ``oracle``).

Timing as in torch_slstm.py: each framework in a process of its own, the two alternated
``--rounds`` times (best of ``--repeats`` calls), wall and process CPU time; torch uses its
default intra-op threads, XLA its own.

  python experiments/torch_star.py --d_model=256 --batch=8 --lengths=512,2048 --repeats=5 \
      --out=docs/benchmarks/torch_star_cpu.jsonl
  python experiments/torch_star.py --d_model=128 --batch=1 --lengths=512,2048,8192 \
      --repeats=5 --out=docs/benchmarks/torch_star_cpu.jsonl

Run it with the machine to itself (see torch_slstm.py: load flatters JAX).
"""
from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from longtext_jax.encoders.star_transformer import StarTransformer  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import benchmark as harness  # noqa: E402  pylint: disable=wrong-import-position
# pylint: disable=wrong-import-position
from torch_slstm import add_timing_args, random_case, run_timing, torch_parameters  # noqa: E402
# pylint: enable=wrong-import-position


def _ln(z: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
  # nn.LayerNorm's epsilon in the Star-Transformer (1e-6).
  return torch.nn.functional.layer_norm(z, z.shape[-1:], None, None, 1e-6) * scale + bias


def _ring(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
  """Left and right ring neighbours of [B, L, H, K]; the ends wrap between the first and
  the last real token of each row (pads are zero and never a neighbour of a real token)."""
  m = mask[:, :, None, None].to(x.dtype)
  x = x * m
  zero = torch.zeros_like(x[:, :1])
  left = torch.cat([zero, x[:, :-1]], dim=1)
  right = torch.cat([x[:, 1:], zero], dim=1)
  last = (mask.sum(1) - 1).clamp(min=0)                           # [B]
  pos = torch.arange(x.shape[1])[None]                           # [1, L]
  x_last = x[torch.arange(x.shape[0]), last]                     # [B, H, K]
  left = torch.where((pos == 0)[:, :, None, None], x_last[:, None], left)
  right = torch.where((pos == last[:, None])[:, :, None, None], x[:, :1], right)
  return left, right


class TorchStar(torch.nn.Module):
  """The Star-Transformer of longtext_jax (default options) in PyTorch, parameters from a
  Flax tree (``params['params']`` of ``StarTransformer()``)."""

  def __init__(self, params: dict, num_cycles: int):
    super().__init__()
    self.num_cycles = num_cycles
    self.p = torch_parameters(params)

  def _w(self, name: str) -> torch.Tensor:
    return self.p[name.replace(".", "__")]

  def _proj(self, x: torch.Tensor, attn: str, which: str, t: int) -> torch.Tensor:
    kernel, bias = self._w(f"cycles.{attn}.{which}.kernel")[t], \
        self._w(f"cycles.{attn}.{which}.bias")[t]
    return torch.einsum("...d,dhk->...hk", x, kernel) + bias

  def _out(self, a: torch.Tensor, attn: str, t: int) -> torch.Tensor:
    return (torch.einsum("...hk,hkd->...d", a, self._w(f"cycles.{attn}.out.kernel")[t])
            + self._w(f"cycles.{attn}.out.bias")[t])

  def forward(self, x: torch.Tensor, mask: torch.Tensor):
    w = self._w
    length = x.shape[1]
    m = mask[..., None].to(x.dtype)
    e = (x + w("pos_embedding")[:length][None]) * m
    s = e.sum(1) / m.sum(1).clamp(min=1)                           # relay s^0: mean of e
    h = e
    for t in range(self.num_cycles):
      # Satellites: attention over [h_{i-1}; h_i; h_{i+1}; e_i; s].
      q = self._proj(h, "satellite_attn", "query", t)
      k, v = self._proj(h, "satellite_attn", "key", t), self._proj(h, "satellite_attn",
                                                                     "value", t)
      kl, kr = _ring(k, mask)
      vl, vr = _ring(v, mask)
      ke, ve = self._proj(e, "satellite_attn", "key", t), self._proj(e, "satellite_attn",
                                                                      "value", t)
      ks, vs = self._proj(s, "satellite_attn", "key", t)[:, None], \
          self._proj(s, "satellite_attn", "value", t)[:, None]
      keys, values = (k, kl, kr, ke, ks), (v, vl, vr, ve, vs)
      scale = q.shape[-1] ** -0.5
      probs = torch.softmax(torch.stack([(q * kk).sum(-1) for kk in keys], -1) * scale, -1)
      att = sum(probs[..., j, None] * vv for j, vv in enumerate(values))
      upd = torch.relu(self._out(att, "satellite_attn", t))
      h_new = _ln(upd, w("cycles.satellite_ln.scale")[t], w("cycles.satellite_ln.bias")[t]) * m
      # Relay: attention from s over [s; H^t], pads masked.
      q = self._proj(s, "relay_attn", "query", t)
      ks, vs = self._proj(s, "relay_attn", "key", t), self._proj(s, "relay_attn", "value", t)
      kh, vh = self._proj(h_new, "relay_attn", "key", t), self._proj(h_new, "relay_attn",
                                                                      "value", t)
      logit_s = (q * ks).sum(-1, keepdim=True) * scale
      logits_h = torch.einsum("bhk,blhk->bhl", q, kh) * scale
      logits_h = logits_h.masked_fill(~mask[:, None], torch.finfo(x.dtype).min)
      probs = torch.softmax(torch.cat([logit_s, logits_h], -1), -1)
      att = probs[..., :1] * vs + torch.einsum("bhl,blhk->bhk", probs[..., 1:], vh)
      upd = torch.relu(self._out(att, "relay_attn", t))
      s = _ln(upd, w("cycles.relay_ln.scale")[t], w("cycles.relay_ln.bias")[t])
      h = h_new
    h = h * m
    max_h = h.masked_fill(~mask[..., None], torch.finfo(x.dtype).min).amax(1)
    return h, s + max_h


def build(d_model: int, length: int, batch: int, cycles: int, heads: int):
  """A StarTransformer, inputs with rows of different lengths, and non-trivial params."""
  enc = StarTransformer(num_cycles=cycles, num_heads=heads, max_len=length, dropout_rate=0.0)
  return (enc, *random_case(enc, d_model, length, batch, shorter_by=3))


def check(cycles: int = 2, heads: int = 4) -> float:
  """Asserts the PyTorch module equals the JAX one (1e-4), values and parameter gradients,
  on a padded batch; returns the largest absolute difference of the outputs."""
  enc, x, mask, params = build(16, 11, 3, cycles, heads)

  def loss(p):
    out = enc.apply(p, x, mask)
    return jnp.sum(out.sequence ** 2) + jnp.sum(out.pooled ** 2), out

  (_, ours), grads = jax.value_and_grad(loss, has_aux=True)(params)
  tm = TorchStar(params["params"], cycles)
  th, tp = tm(torch.tensor(np.asarray(x)), torch.tensor(np.asarray(mask)))
  ((th ** 2).sum() + (tp ** 2).sum()).backward()
  np.testing.assert_allclose(th.detach().numpy(), ours.sequence, atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(tp.detach().numpy(), ours.pooled, atol=1e-4, rtol=1e-4)
  flat = jax.tree_util.tree_flatten_with_path(grads["params"])[0]
  for path, g in flat:
    name = "__".join(k.key for k in path)
    np.testing.assert_allclose(tm.p[name].grad.numpy(), g, atol=1e-3, rtol=1e-3,
                               err_msg=name)
  return float(np.max(np.abs(th.detach().numpy() - np.asarray(ours.sequence))))


def main(argv=None) -> int:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--d_model", type=int, default=256)
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--lengths", default="512,2048")
  p.add_argument("--cycles", type=int, default=2)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--out", default="", help="append the rows to this JSONL file")
  p.add_argument("--check", action="store_true", help="only the equality check")
  add_timing_args(p)
  args = p.parse_args(argv)

  def case(length):
    enc, x, _, params = build(args.d_model, length, args.batch, args.cycles, args.heads)
    return enc, params, x, lambda: TorchStar(params["params"], args.cycles)

  meta = {"encoder": "star_transformer", "d_model": args.d_model, "batch": args.batch,
          "cycles": args.cycles, "heads": args.heads, "device": jax.devices()[0].device_kind,
          "host": harness.host(), "allocator": harness.allocator()}
  worker = [f"--d_model={args.d_model}", f"--batch={args.batch}", f"--cycles={args.cycles}",
            f"--heads={args.heads}"]
  script = os.path.abspath(__file__)
  if args.framework:
    return run_timing(args, script, worker, case, meta)

  diff = check(args.cycles, args.heads)
  print(f"check: the PyTorch Star-Transformer equals the JAX one (values and gradients, "
        f"1e-4; max |diff| {diff:.1e})")
  if args.check:
    return 0
  return run_timing(args, script, worker, case, meta)


if __name__ == "__main__":
  sys.exit(main())
