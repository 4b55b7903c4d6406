"""S-LSTM (graph recurrent network) MLM pretraining, Wang et al. (2022) Sec. 3.1.

arg = '[<variant>][,tiny][,pydoc][,encoder=<name>]' (encoder= swaps the S-LSTM):
  paper    10 recurrent steps x 1792 hidden (186M parameters with the 30k vocabulary),
           batch 128 x 512, Adam (0.9, 0.98), lr 3e-3, 3000 warmup steps then linear decay,
           300k steps. Data: ``config.data.text_dir`` (Wikipedia + BookCorpus as .txt files).
  paper24  24 steps x 1280 hidden, otherwise as ``paper``.
  tiny     (a flag) a minute on a CPU: 2 steps x 32 hidden on Python's documentation topics
           (the corpus shipped with Python), for tests and smoke runs.
',pydoc' pretrains a paper variant on the shipped corpus instead of text files.

Launch:
  python -m longtext_jax.tokenize train --input /data/wiki_books/ --vocab_size 30000 \
      --output runs/spm/en
  python -m longtext_jax.main --config=configs/slstm/pretrain.py:paper --workdir=runs/slstm_pt \
      --config.data.text_dir=/data/wiki_books --config.data.tokenizer.path=runs/spm/en.model
  python -m longtext_jax.main --config=configs/slstm/pretrain.py:tiny --workdir=/tmp/slstm_pt
Then fine-tune with configs/slstm/finetune.py (``--config.init_from.path=<this workdir>``).
"""
from configs import common
from configs import mlm
from longtext_jax.config import encoder_config

VARIANTS = {
    # name: (recurrent steps, hidden size)
    "paper": (10, 1792),
    "paper24": (24, 1280),
    "tiny": (2, 32),
}
ARGS = dict(positional=[common.Positional("variant", ("paper", "paper24"), "paper")],
            flags=("tiny", "pydoc"))


def get_config(arg: str = "tiny"):
  """arg: '[paper|paper24][,tiny][,pydoc][,encoder=<name>]'."""
  args = common.parse_arg(arg, **ARGS)
  variant = "tiny" if args["tiny"] else args["variant"]
  steps, width = VARIANTS[variant]
  c = common.experiment(
      # SentencePiece 30k (authors' code); output projection = input embedding transposed.
      task=dict(name="mlm", vocab_size=30000, tie_embeddings=True),
      data=dict(name="text_mlm",  # *.txt files under data.text_dir; 'pydoc_mlm': shipped.
                tokenizer_vocab_size=30000,  # Pieces when the tokenizer is trained here.
                seq_len=512,  # Maximum length (paper): rows of <s> 510 pieces </s>.
                eval_one_in=100,
                batch_size=128,  # Paper: 128 x 512 (the authors' code: 256).
                eval_batch_size=128),
      model=dict(input="tokens", vocab_size=30000,
                 d_model=width,  # Hidden size of token and sentence nodes.
                 embed_dropout=0.0),  # Dropout 0 in pretraining (authors' code).
      optim=dict(learning_rate=3e-3,  # Paper (the authors' code: 5e-4).
                 warmup_steps=3000,  # Paper: warmup over the first 3,000 steps...
                 schedule="linear", end_lr_factor=0.0,  # ... then linear decay to 0.
                 b1=0.9, b2=0.98,  # Paper.
                 eps=1e-6, weight_decay=0.01,  # Authors' code.
                 clip_norm=1.0),
      train=dict(num_steps=300_000,  # Paper.
                 log_every=100, eval_every=5000, checkpoint_every=5000,
                 best_metric="loss", best_mode="min"))
  # .model file; trained on the corpus (cached) when empty.
  c.data.tokenizer.kind, c.data.tokenizer.path = "sentencepiece", ""
  c.model.encoder = encoder_config(
      "slstm",
      num_steps=steps,  # Recurrent steps; parameters shared by all of them.
      window=1,  # Neighbours on each side (Eq. 1).
      update="sync",  # Paper Eq. 2; 'async' = the authors' code.
      position="learned",  # Learned absolute positions (x = E(w) + P(i)).
      max_len=512,  # Position table size.
      embed_norm=True,  # LayerNorm on E + P.
      dropout_rate=0.0,  # No dropout in pretraining (authors' code).
      init_std=0.02,  # N(0, 0.02) initialisation (authors' code).
      remat="none",  # e.g. 'full' to trade time for memory at long lengths.
      dtype="bfloat16",  # Compute dtype (cells, norms, gates, softmax stay float32).
  )
  if args["pydoc"] or args["tiny"]:
    common.experiment(c, data=dict(name="pydoc_mlm", eval_one_in=10, tokenizer_vocab_size=8000),
                      model=dict(vocab_size=8000), task=dict(vocab_size=8000))
  if args["tiny"]:
    mlm.tiny_mlm(c)
    c.model.encoder.max_len = 64
    c.model.encoder.dtype = "float32"
  common.apply_encoder_option(c, args)
  return c
