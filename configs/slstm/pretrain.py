"""S-LSTM (graph recurrent network) MLM pretraining, Wang et al. (2022) Sec. 3.1.

Variants (the config arg):
  paper    10 recurrent steps x 1792 hidden (186M parameters with the 30k vocabulary),
           batch 128 x 512, Adam (0.9, 0.98), lr 3e-3, 3000 warmup steps then linear decay,
           300k steps. Data: ``config.data.text_dir`` (Wikipedia + BookCorpus as .txt files).
  paper24  24 steps x 1280 hidden, otherwise as ``paper``.
  tiny     a minute on a CPU: 2 steps x 32 hidden on Python's documentation topics (the
           corpus shipped with Python), for tests and smoke runs.
Append ',pydoc' to a paper variant to pretrain on the shipped corpus instead of text files.

Launch:
  python -m longtext_jax.tokenize train --input /data/wiki_books/ --vocab_size 30000 \
      --output runs/spm/en
  python -m longtext_jax.main --config=configs/slstm/pretrain.py:paper --workdir=runs/slstm_pt \
      --config.data.text_dir=/data/wiki_books --config.data.tokenizer.path=runs/spm/en.model
  python -m longtext_jax.main --config=configs/slstm/pretrain.py:tiny --workdir=/tmp/slstm_pt
Then fine-tune with configs/slstm/finetune.py (``--config.init_from.path=<this workdir>``).
"""
from longtext_jax.config import base_config, encoder_config

VARIANTS = {
    # name: (recurrent steps, hidden size)
    "paper": (10, 1792),
    "paper24": (24, 1280),
    "tiny": (2, 32),
}


def get_config(arg: str = "tiny"):
  """arg: 'paper' | 'paper24' | 'tiny', optionally followed by ',pydoc'."""
  parts = arg.split(",")
  variant, extra = parts[0], set(parts[1:])
  if variant not in VARIANTS or extra - {"pydoc"}:
    raise ValueError(f"config arg {arg!r}: expected one of {sorted(VARIANTS)} optionally "
                     "followed by ',pydoc'")
  steps, width = VARIANTS[variant]
  c = base_config()
  c.task.name = "mlm"
  c.task.vocab_size = 30000  # SentencePiece 30k (authors' code); equals model.vocab_size.
  c.task.tie_embeddings = True  # Output projection = input embedding transposed (+ bias).

  c.data.name = "text_mlm"  # *.txt files under data.text_dir; 'pydoc_mlm': shipped corpus.
  c.data.text_dir = ""  # Folder of pretraining text (one document per file).
  c.data.text_pattern = "*.txt"  # Files to read under text_dir.
  c.data.one_per_line = False  # True: every non-empty line is a document.
  c.data.tfds_name = ""  # tfds_mlm: a TFDS text dataset prepared on disk (wikipedia, c4, lm1b).
  c.data.tfds_split = "train"  # tfds_mlm: split to read (slicing allowed).
  c.data.tfds_data_dir = ""  # tfds_mlm: TFDS data folder ('' = TFDS default).
  c.data.tfds_text_key = "text"  # tfds_mlm: feature holding the text.
  c.data.max_documents = 0  # tfds_mlm: read at most this many documents (0 = all).
  c.data.tokenizer.kind = "sentencepiece"
  c.data.tokenizer.path = ""  # .model file; trained on the corpus (cached) when empty.
  c.data.tokenizer_vocab_size = 30000  # Pieces when the tokenizer is trained here.
  c.data.seq_len = 512  # Maximum length (paper): rows of <s> 510 pieces </s>.
  c.data.mask_prob = 0.15  # BERT: 15% of the tokens, 80/10/10 <mask>/random/kept.
  c.data.whole_word_mask = False  # Mask whole words ('▁' pieces and their continuations).
  c.data.mask_copies = 1000  # Virtual epochs, each with its own (seeded) masks.
  c.data.eval_every = 100  # 1 document in eval_every goes to the eval split.
  c.data.batch_size = 128  # Paper: 128 x 512 (the authors' code: 256).
  c.data.eval_batch_size = 128

  c.model.input = "tokens"
  c.model.vocab_size = 30000
  c.model.d_model = width  # Hidden size of token and sentence nodes.
  c.model.embed_dropout = 0.0  # Dropout 0 in pretraining (authors' code).
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

  c.optim.learning_rate = 3e-3  # Paper (the authors' code: 5e-4).
  c.optim.warmup_steps = 3000  # Paper: warmup over the first 3,000 steps.
  c.optim.schedule = "linear"  # Then linear decay...
  c.optim.end_lr_factor = 0.0  # ...to 0.
  c.optim.b1 = 0.9
  c.optim.b2 = 0.98  # Paper.
  c.optim.eps = 1e-6  # Authors' code.
  c.optim.weight_decay = 0.01  # Authors' code.
  c.optim.clip_norm = 1.0

  c.train.num_steps = 300_000  # Paper.
  c.train.log_every = 100
  c.train.eval_every = 5000
  c.train.checkpoint_every = 5000
  c.train.best_metric = "loss"
  c.train.best_mode = "min"

  if "pydoc" in extra or variant == "tiny":
    c.data.name = "pydoc_mlm"
    c.data.eval_every = 10
    c.data.tokenizer_vocab_size = 8000
    c.model.vocab_size = c.task.vocab_size = 8000
  if variant == "tiny":  # About a minute on a CPU.
    c.data.seq_len = 64
    c.data.tokenizer_vocab_size = 1000
    c.model.vocab_size = c.task.vocab_size = 1000
    c.data.batch_size = 16
    c.data.eval_batch_size = 64
    c.model.encoder.max_len = 64
    c.model.encoder.dtype = "float32"
    c.optim.learning_rate = 3e-3
    c.optim.warmup_steps = 10
    c.train.num_steps = 100
    c.train.log_every = 10
    c.train.eval_every = 50
    c.train.checkpoint_every = 50
    c.train.progress_bar = False
  return c
