"""Masked-LM pretraining for any bidirectional encoder (the S-LSTM paper's objective).

15% of the tokens selected, 80/10/10 <mask>/random/kept (optionally whole words), loss on the
selected positions only, output projection tied to the input embedding; Adam (0.9, 0.98) with
warmup then linear decay. The S-LSTM paper's full settings are in configs/slstm/pretrain.py.

arg = '<encoder>[,tiny][,text]' with encoder one of MLM_ENCODERS, the token-level
bidirectional ones (bilstm, ran, slstm, star_transformer, transformer, windowed).
Data: Python's documentation topics by default (present everywhere); ',text' reads the
*.txt files under config.data.text_dir.

Launch:
  python -m longtext_jax.main --config=configs/mlm.py:transformer,tiny --workdir=/tmp/mlm_tf
  python -m longtext_jax.main --config=configs/mlm.py:slstm,text --workdir=runs/mlm_slstm \
      --config.data.text_dir=/data/text --config.data.tokenizer.path=runs/spm/en.model
"""
from configs import common
from longtext_jax import encoders
from longtext_jax.config import encoder_config

# The encoders MLM can pretrain: token-level and bidirectional (the BERT family embeds ids
# itself and returns document outputs; the left-to-right LSTM reads one direction).
MLM_ENCODERS = tuple(n for n in common.ENCODER_NAMES
                     if encoders.input_kind(encoders.ENCODERS[n]) == "embeddings"
                     and n != "lstm")

# Encoder settings per name (other fields keep the encoder's defaults).
ENCODERS = {
    "transformer": dict(num_layers=4, num_heads=4, dropout_rate=0.0, position="learned",
                        max_len=512),
    "slstm": dict(num_steps=4, window=1, update="sync", position="learned", max_len=512),
}


def tiny_mlm(c):
  """The tiny switch of the MLM configs (also configs/slstm/pretrain.py): about a minute on
  a CPU with a 1000-piece SentencePiece model trained on the corpus."""
  common.tiny(c, 100, 50, warmup_steps=10, data__seq_len=64, data__tokenizer_vocab_size=1000,
              model__vocab_size=1000, task__vocab_size=1000, data__batch_size=16,
              data__eval_batch_size=64, optim__learning_rate=3e-3, train__progress_bar=False)


def get_config(arg: str = "transformer,tiny"):
  """arg: '<encoder>[,tiny][,text]'."""
  args = common.parse_arg(arg, [common.Positional("encoder", MLM_ENCODERS)],
                          flags=("tiny", "text"))
  name = args["encoder"]
  c = common.experiment(
      task=dict(name="mlm", vocab_size=8000,  # Equals model.vocab_size.
                tie_embeddings=True),  # Output projection = input embedding transposed.
      data=dict(name="text_mlm" if args["text"] else "pydoc_mlm",
                tokenizer_vocab_size=8000,  # Pieces when the tokenizer is trained here.
                seq_len=256,  # Rows of <s> seq_len-2 pieces </s>.
                batch_size=32),
      model=dict(input="tokens", vocab_size=8000, d_model=256,
                 encoder=encoder_config(name, **ENCODERS.get(name, {}))),
      # Adam (0.9, 0.98) as in the S-LSTM paper / RoBERTa, warmup then linear decay to 0.
      optim=dict(learning_rate=5e-4, warmup_steps=500, schedule="linear", end_lr_factor=0.0,
                 b1=0.9, b2=0.98, eps=1e-6, weight_decay=0.01),
      train=common.steps(20_000, 1000, best_metric="loss", best_mode="min"))
  # .model file; trained on the corpus (cached) when empty.
  c.data.tokenizer.kind, c.data.tokenizer.path = "sentencepiece", ""
  if args["tiny"]:
    tiny_mlm(c)
    c.model.d_model = 32
    for key in ("num_layers", "num_steps"):
      if key in c.model.encoder:
        c.model.encoder[key] = 2
    if "max_len" in c.model.encoder and name in ENCODERS:
      c.model.encoder.max_len = 64
  return c
