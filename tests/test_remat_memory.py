"""``remat`` saves memory: the compiled gradient with full rematerialisation needs less
temporary memory than without, for every encoder that takes a ``remat`` policy.

XLA's buffer accounting (``memory_analysis()`` of the compiled program, nothing is run), so
the test is deterministic. It guards two ways a remat silently saves nothing on XLA:CPU
(layers/remat.py): a scan over layers/cycles unrolled without a loop (XLA merges the
recomputation with the forward; the Star-Transformer's unrolled default did so until the
encoders kept the loop whenever a remat policy is set), and blocks in a Python loop under
XLA:CPU's default scheduler (the trainer compiles with ``CPU_MEMORY_SCHEDULER`` then).
"""
import jax
import jax.numpy as jnp
import pytest

from longtext_jax import config as config_lib
from longtext_jax import encoders
from longtext_jax.encoders import bert as bert_lib
from longtext_jax.layers import remat as remat_lib
from longtext_jax.train import benchmark as harness
from longtext_jax.train import loop

B, L, D = 2, 256, 64

# Blocks in a rolled scan: a remat works under XLA's default CPU scheduler.
SCANNED = {
    "transformer": lambda r: encoders.Transformer(num_layers=3, num_heads=4, remat=r,
                                                  dropout_rate=0.0),
    "star": lambda r: encoders.StarTransformer(num_cycles=2, num_heads=4, remat=r,
                                               dropout_rate=0.0, max_len=L),
    "star_shared": lambda r: encoders.StarTransformer(
        num_cycles=2, num_heads=4, remat=r, dropout_rate=0.0, max_len=L,
        share_cycle_params=True),
    "slstm": lambda r: encoders.SLSTM(num_steps=6, remat=r, max_len=L),
}
# Blocks in a Python loop: a remat needs the memory-optimized scheduler on XLA:CPU.
LOOPED = {
    "transformer_unscanned": lambda r: encoders.Transformer(
        num_layers=3, num_heads=4, remat=r, dropout_rate=0.0, scan_layers=False),
    "bert": lambda r: bert_lib.Bert(num_layers=3, hidden_size=D, intermediate_size=4 * D,
                                    hidden_dropout_rate=0.0, attention_dropout_rate=0.0,
                                    remat=r),
}


def _grad_temp_bytes(encoder, name: str, options=None) -> int:
  """Temporary bytes of the compiled gradient of ``harness.speed_loss`` (both outputs)."""
  mask = jax.ShapeDtypeStruct((B, L), jnp.bool_)
  x = jax.ShapeDtypeStruct((B, L) if name == "bert" else (B, L, D),  # BERT: token ids.
                           jnp.int32 if name == "bert" else jnp.float32)
  params = jax.eval_shape(encoder.init, jax.random.key(1), x, mask)
  compiled, _ = harness.compile_fn(jax.grad(harness.speed_loss(encoder)), (params, x, mask),
                                   options)
  return harness.memory(compiled)["temp_bytes"]


@pytest.mark.parametrize("name", [n if n in ("star", "transformer") else
                                  pytest.param(n, marks=pytest.mark.long)
                                  for n in sorted(SCANNED)])
def test_full_remat_needs_less_gradient_memory(name):
  plain = _grad_temp_bytes(SCANNED[name]("none"), name)
  remat = _grad_temp_bytes(SCANNED[name]("full"), name)
  assert remat < 0.9 * plain, (name, remat, plain)


@pytest.mark.parametrize("name", sorted(LOOPED))
def test_full_remat_of_looped_blocks_needs_the_memory_scheduler(name):
  options = remat_lib.CPU_MEMORY_SCHEDULER
  plain = _grad_temp_bytes(LOOPED[name]("none"), name, options)
  remat = _grad_temp_bytes(LOOPED[name]("full"), name, options)
  assert remat < 0.9 * plain, (name, remat, plain)


def test_trainer_picks_the_memory_scheduler_for_remat_on_cpu():
  c = config_lib.base_config()
  c.model.encoder = config_lib.encoder_config("chunk_bert")
  assert loop.train_compiler_options(c, "cpu") is None  # No remat, 'auto'.
  c.model.encoder.remat = "dots"
  assert loop.train_compiler_options(c, "cpu") == remat_lib.CPU_MEMORY_SCHEDULER
  assert loop.train_compiler_options(c, "gpu") is None
  c.train.cpu_scheduler = "xla"
  assert loop.train_compiler_options(c, "cpu") is None
  c.model.encoder.remat = "none"
  c.train.cpu_scheduler = "memory"
  assert loop.train_compiler_options(c, "cpu") == remat_lib.CPU_MEMORY_SCHEDULER
  assert remat_lib.uses_remat({"a": {"b": [1], "remat": "full"}})
  assert not remat_lib.uses_remat({"remat": "none", "x": {"remat": "none"}})


def test_trainers_step_with_remat_compiles_with_the_memory_scheduler(tmp_path):
  """End to end through ``loop.compile_steps``: a Transformer whose layers are a Python loop
  with full remat; the train step as the trainer compiles it ('auto': the memory-optimized
  scheduler, since a remat is set) needs less memory than with ``cpu_scheduler='xla'``."""
  from configs import masked_summation  # pylint: disable=import-outside-toplevel
  temp = {}
  for choice in ("auto", "xla"):
    c = masked_summation.get_config("transformer,tiny")
    c.model.encoder.update(remat="full", scan_layers=False, num_layers=3)
    c.train.cpu_scheduler = choice
    run = loop.make_run(c, str(tmp_path))
    splits = loop.build_data(c, run.task)
    batch = loop._strip_host_keys(next(iter(loop.make_train_iterator(c, splits["train"]))))
    spec = loop.build_state(run, batch)
    train_step, _ = loop.compile_steps(run, spec)
    compiled = train_step.lower(spec.abstract, batch, jax.random.key(0)).compile()
    temp[choice] = compiled.memory_analysis().temp_size_in_bytes
  assert temp["auto"] < 0.9 * temp["xla"], temp
