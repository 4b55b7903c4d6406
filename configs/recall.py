"""Copy and associative recall for causal language models: the loss counts only the answer
(``target_mask``): the copied half ('copy'), or the value of the queried key ('associative').

arg = '[copy|associative][,tiny][,encoder=<name>]' (default: a causal Transformer). The
task needs a causal encoder: ',encoder=lstm' works as it is; 'transformer' and 'ran' need
--config.model.encoder.causal=True / .mask_type=causal; the others cannot be causal
(config.validate names them).

Launch:
  python -m longtext_jax.main --config=configs/recall.py:associative --workdir=runs/recall
  python -m longtext_jax.main --config=configs/recall.py:copy,tiny --workdir=/tmp/copy
"""
from configs import common
from longtext_jax.config import encoder_config
from longtext_jax.data import synthetic


def get_config(arg: str = "associative"):
  """arg: '[copy|associative][,tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg, [common.Positional("kind", ("copy", "associative"),
                                                  "associative")])
  c = common.experiment(
      task=dict(name="lm"),
      # 32 symbols (keys; values use another 32); 256 tokens of prompt and answer.
      data=dict(name="recall", recall_kind=args["kind"], recall_vocab=32, seq_len=256,
                num_train=20000, num_eval=1000, batch_size=32),
      model=dict(d_model=64),
      optim=dict(learning_rate=1e-3, warmup_steps=200),
      train=common.steps(3000, 500))
  if args["tiny"]:
    common.tiny(c, 40, 20, data__recall_vocab=8, data__seq_len=20,
                **dict(common.SMALL_DATA, data__eval_batch_size=64))
  c.model.vocab_size = c.task.vocab_size = synthetic.FIRST_ID + 2 * c.data.recall_vocab
  c.model.encoder = encoder_config("transformer", num_layers=2, num_heads=4, causal=True,
                                   dropout_rate=0.0, position="rotary", max_len=1024)
  common.apply_encoder_option(c, args)
  return c
