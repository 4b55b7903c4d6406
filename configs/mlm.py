"""Masked-LM pretraining for any bidirectional encoder (the S-LSTM paper's objective).

15% of the tokens selected, 80/10/10 <mask>/random/kept (optionally whole words), loss on the
selected positions only, output projection tied to the input embedding; Adam (0.9, 0.98) with
warmup then linear decay. The S-LSTM paper's full settings are in configs/slstm/pretrain.py.

Config arg: '<encoder>[,tiny][,text]' with encoder a key of longtext_jax.encoders.ENCODERS
that can be pretrained bidirectionally (transformer, slstm, ran, star_transformer, ...).
Data: Python's documentation topics by default (present everywhere); ',text' reads the
*.txt files under config.data.text_dir.

Launch:
  python -m longtext_jax.main --config=configs/mlm.py:transformer,tiny --workdir=/tmp/mlm_tf
  python -m longtext_jax.main --config=configs/mlm.py:slstm,text --workdir=runs/mlm_slstm \
      --config.data.text_dir=/data/text --config.data.tokenizer.path=runs/spm/en.model
"""
from longtext_jax import encoders
from longtext_jax.config import base_config, encoder_config

# Encoder settings per name (other fields keep the encoder's defaults).
ENCODERS = {
    "transformer": dict(num_layers=4, num_heads=4, dropout_rate=0.0, position="learned",
                        max_len=512),
    "slstm": dict(num_steps=4, window=1, update="sync", position="learned", max_len=512),
}


def get_config(arg: str = "transformer,tiny"):
  """arg: '<encoder>[,tiny][,text]'."""
  parts = arg.split(",")
  name, flags = parts[0], set(parts[1:])
  if flags - {"tiny", "text"}:
    raise ValueError(f"config arg {arg!r}: flags must be among 'tiny', 'text'")
  if name not in encoders.ENCODERS:
    raise ValueError(f"encoder {name!r} is not available; choose one of "
                     f"{sorted(encoders.ENCODERS)}")
  c = base_config()
  c.task.name = "mlm"
  c.task.vocab_size = 8000  # Equals model.vocab_size.
  c.task.tie_embeddings = True  # Output projection = input embedding transposed (+ bias).

  c.data.name = "text_mlm" if "text" in flags else "pydoc_mlm"
  c.data.text_dir = ""  # text_mlm: folder of *.txt documents.
  c.data.text_pattern = "*.txt"
  c.data.one_per_line = False  # text_mlm: every non-empty line is a document.
  c.data.tfds_name = ""  # tfds_mlm: a TFDS text dataset prepared on disk (wikipedia, c4, lm1b).
  c.data.tfds_split = "train"  # tfds_mlm: split to read (slicing allowed).
  c.data.tfds_data_dir = ""  # tfds_mlm: TFDS data folder ('' = TFDS default).
  c.data.tfds_text_key = "text"  # tfds_mlm: feature holding the text.
  c.data.max_documents = 0  # tfds_mlm: read at most this many documents (0 = all).
  c.data.tokenizer.kind = "sentencepiece"
  c.data.tokenizer.path = ""  # .model file; trained on the corpus (cached) when empty.
  c.data.tokenizer_vocab_size = 8000  # Pieces when the tokenizer is trained here.
  c.data.seq_len = 256  # Rows of <s> seq_len-2 pieces </s>.
  c.data.mask_prob = 0.15
  c.data.whole_word_mask = False
  c.data.mask_copies = 1000  # Virtual epochs with their own masks (dynamic masking).
  c.data.eval_every = 10  # 1 document in eval_every goes to the eval split.
  c.data.batch_size = 32

  c.model.input = "tokens"
  c.model.vocab_size = 8000
  c.model.d_model = 256
  c.model.encoder = encoder_config(name, **ENCODERS.get(name, {}))

  c.optim.learning_rate = 5e-4
  c.optim.warmup_steps = 500
  c.optim.schedule = "linear"
  c.optim.end_lr_factor = 0.0
  c.optim.b1 = 0.9
  c.optim.b2 = 0.98  # The S-LSTM paper / RoBERTa.
  c.optim.eps = 1e-6
  c.optim.weight_decay = 0.01
  c.train.num_steps = 20_000
  c.train.eval_every = 1000
  c.train.checkpoint_every = 1000
  c.train.best_metric = "loss"
  c.train.best_mode = "min"
  if "tiny" in flags:  # About a minute on a CPU.
    c.data.seq_len = 64
    c.data.tokenizer_vocab_size = 1000
    c.model.vocab_size = c.task.vocab_size = 1000
    c.data.batch_size = 16
    c.data.eval_batch_size = 64
    c.model.d_model = 32
    for key in ("num_layers", "num_steps"):
      if key in c.model.encoder:
        c.model.encoder[key] = 2
    if "max_len" in c.model.encoder and name in ENCODERS:
      c.model.encoder.max_len = 64
    c.optim.learning_rate = 3e-3
    c.optim.warmup_steps = 10
    c.train.num_steps = 100
    c.train.log_every = 10
    c.train.eval_every = 50
    c.train.checkpoint_every = 50
    c.train.progress_bar = False
  return c
