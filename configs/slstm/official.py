"""S-LSTM exactly as the authors' code computes it, one config per registered architecture.

The authors' fairseq code (ylwangy/slstm_pytorch, ``models/slstm/model.py``) registers five
architectures; ``get_config('<arch>')`` sets every encoder field for one of them (see
docs/slstm.md, "Paper vs authors' code vs ours", for what each field changes):

  slstm, slstm1792   D=1792, 10 steps, no gate LayerNorm, in-block positions on the s gate
                     (pos_g2h) and on h_i in the f_i gates (pos_h2g), none at the input
  slstm1280          the same with D=1280
  slstm1792_ln_posinput           D=1792, 10 steps, gate LayerNorms, positions at the input
  slstm1280_ln_posinput_layer24   D=1280, 24 steps, gate LayerNorms, positions at the input

Everything else is the MLM pretraining of configs/slstm/pretrain.py:paper, with the authors'
pretraining settings where they differ from the paper (lr 5e-4, batch 256 x 512).

Launch:
  python -m longtext_jax.main --config=configs/slstm/official.py:slstm1792_ln_posinput \
      --workdir=runs/slstm_official --config.data.text_dir=/data/wiki_books \
      --config.data.tokenizer.path=runs/spm/en.model
Fine-tune such a run with configs/slstm/finetune.py after setting the same encoder fields.
"""
from configs import common
from configs.slstm import pretrain
from longtext_jax.config import encoder_config

# arch: (width D, recurrent steps, gate LayerNorms, in-block positions, input positions)
ARCHS = {
    "slstm": (1792, 10, False, True, False),
    "slstm1280": (1280, 10, False, True, False),
    "slstm1792": (1792, 10, False, True, False),
    "slstm1792_ln_posinput": (1792, 10, True, False, True),
    "slstm1280_ln_posinput_layer24": (1280, 24, True, False, True),
}


ARGS = dict(positional=[common.Positional("arch", tuple(ARCHS), "slstm1792_ln_posinput")])


def get_config(arg: str = "slstm1792_ln_posinput"):
  """arg: '<arch>[,tiny]', arch one of ``ARCHS`` (the authors' registered architecture names);
  ``tiny`` keeps the arch's switches on configs/slstm/pretrain.py:tiny's sizes (2 steps)."""
  args = common.parse_arg(arg, **ARGS)
  width, steps, ln, block_pos, input_pos = ARCHS[args["arch"]]
  c = pretrain.get_config("tiny" if args["tiny"] else "paper")
  if args["tiny"]:
    width, steps = c.model.d_model, 2
  c.model.d_model = width  # encoder_embed_dim.
  c.model.embed_dropout = 0.0  # The encoder drops its input itself (dropout_rate).
  c.model.encoder = encoder_config(
      "slstm",
      num_steps=steps,  # encoder_layers: one block applied `steps` times (shared weights).
      window=1,  # slstm_kernel_size.
      update="async",  # The sentence node reads the new h, c of the same step.
      gate_norm=ln,  # `ln`: a LayerNorm per token gate, on f_g, o_g and on the f_i gates.
      sentence_gate_norm="after_sigmoid",  # f_g = LN(sigmoid(z)), o_g = LN(sigmoid(z)).
      pos_g2h=block_pos,  # In-block position table added to the s-gate pre-activation...
      pos_h2g=block_pos,  # ...and to h_i in the input of the f_i gates (the same table).
      position="learned" if input_pos else "none",  # `pos_input`: E + P at the input.
      max_len=512,  # max_source_positions.
      embed_norm=True,  # layernorm_embedding (always built and applied).
      dropout_rate=0.0,  # Pretraining (the architecture's default, 0.1, when fine-tuning).
      dropout_placement="before_sentence",  # h dropped before the sentence node reads it.
      init_std=0.02,  # init_bert_params: every Linear and embedding N(0, 0.02).
      scan_steps=True,  # Implementation only (same outputs as a loop).
      remat="none",  # Implementation only.
      dtype="bfloat16",  # The authors ran fp16; 'float32' for exact comparisons.
      param_dtype="float32",
  )
  if args["tiny"]:
    c.model.encoder.max_len = c.data.seq_len
    c.model.encoder.dtype = "float32"
    return c
  c.optim.learning_rate = 5e-4  # Authors' pretraining peak lr (the paper: 3e-3).
  c.data.batch_size = 256  # Authors' pretraining batch: 256 x 512 tokens (the paper: 128).
  return c
