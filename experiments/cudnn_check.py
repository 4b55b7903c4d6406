"""On a GPU: the Transformer's cuDNN attention path (a right-padding key mask passed as key
counts, layers/attention.py ``key_padding_attention``) against XLA's masked attention.

  python experiments/cudnn_check.py   # prints the relative errors, bf16

Values and gradients of random bf16 inputs with right-padded masks; rows are compared where
queries are real tokens (pad queries' outputs are discarded by the encoders).
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

from longtext_jax.layers import attention


def main() -> int:
  worst = 0.0
  for batch, length, heads, dim in ((2, 256, 4, 32), (3, 1024, 8, 64), (1, 4096, 4, 32)):
    rng = np.random.default_rng(length)
    q, k, v = (jnp.asarray(rng.normal(size=(batch, length, heads, dim)), jnp.bfloat16)
               for _ in range(3))
    lengths = rng.integers(1, length + 1, size=batch)
    keys = np.arange(length)[None] < lengths[:, None]
    mask = jnp.asarray(keys[:, None, None, :])
    real = jnp.asarray(keys)[:, :, None, None]

    def out(impl):
      return lambda q, k, v: jnp.where(real, attention.dot_product_attention(
          q, k, v, mask, impl).astype(jnp.float32), 0.0)

    def grads(impl):
      loss = lambda q, k, v: jnp.sum(out(impl)(q, k, v) ** 2)
      return lambda q, k, v: jnp.concatenate(
          [g.astype(jnp.float32).ravel() for g in jax.grad(loss, (0, 1, 2))(q, k, v)])
    # The inputs are arguments, not constants: XLA would fold the reference at compile time.
    for name, fn in (("values", out), ("grads", grads)):
      ref = jax.jit(fn("xla"))(q, k, v)
      got = jax.jit(fn("cudnn"))(q, k, v)
      rel = float(jnp.linalg.norm(got - ref) / jnp.linalg.norm(ref))
      worst = max(worst, rel)
      print(f"B={batch} L={length} H={heads} K={dim} {name}: relative error {rel:.2e}, "
            f"NaN {bool(jnp.isnan(got).any())}")
  print(f"worst {worst:.2e} (bf16 operands: expected 1e-3 to 1e-2)")
  return 0 if worst < 3e-2 else 1


if __name__ == "__main__":
  sys.exit(main())
