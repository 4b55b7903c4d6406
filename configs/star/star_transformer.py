"""Star-Transformer on the paper's datasets with its Table 1 settings (300-d, 6 heads x 50).

arg = '<dataset>[,crf][,tiny]' with dataset one of sst, mtl16:<domain> (e.g. mtl16:books),
snli, conll03, ontonotes, ptb_pos. ',crf' adds the linear-chain CRF to conll03/ontonotes;
',tiny' is a seconds-long CPU smoke run (needs the data all the same).

The data are local files read by the loader named ``data.name`` (``data.path`` points at
them); nothing is downloaded. A loader that does not exist yet fails with "unknown data
source" before any training starts.

Launch:
  python -m longtext_jax.main --config=configs/star/star_transformer.py:sst \
      --workdir=runs/star_sst --config.data.path=data/sst
  python -m longtext_jax.main --config=configs/star/star_transformer.py:mtl16:books \
      --workdir=runs/star_mtl16_books --config.data.path=data/mtl16
  python -m longtext_jax.main --config=configs/star/star_transformer.py:snli \
      --workdir=runs/star_snli --config.data.path=data/snli
  python -m longtext_jax.main --config=configs/star/star_transformer.py:conll03,crf \
      --workdir=runs/star_conll03_crf --config.data.path=data/conll2003
  python -m longtext_jax.main --config=configs/star/star_transformer.py:ontonotes \
      --workdir=runs/star_ontonotes --config.data.path=data/ontonotes
  python -m longtext_jax.main --config=configs/star/star_transformer.py:ptb_pos \
      --workdir=runs/star_ptb_pos --config.data.path=data/ptb_pos
"""
from longtext_jax.config import base_config, encoder_config

MTL16_DOMAINS = ("apparel", "baby", "books", "camera", "dvd", "electronics", "health",
                 "imdb", "kitchen", "magazines", "mr", "music", "software", "sports",
                 "toys", "video")
CONLL03_TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC",
                "I-MISC")
ONTONOTES_TYPES = ("PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT",
                   "WORK_OF_ART", "LAW", "LANGUAGE", "DATE", "TIME", "PERCENT", "MONEY",
                   "QUANTITY", "ORDINAL", "CARDINAL")
ONTONOTES_TAGS = ("O",) + tuple(f"{k}-{t}" for t in ONTONOTES_TYPES for k in ("B", "I"))

# dataset -> (task, classes, vocab |V| of Table 1, H DIM, lr, data.name)
DATASETS = {
    "sst": ("classification", 5, 20_000, 300, 1e-4, "sst"),
    "mtl16": ("classification", 2, 28_000, 300, 1e-4, "mtl16"),
    "snli": ("pair_classification", 3, 34_000, 600, 1e-4, "snli"),
    "conll03": ("span_tagging", len(CONLL03_TAGS), 25_000, 300, 1e-4, "conll2003"),
    "ontonotes": ("span_tagging", len(ONTONOTES_TAGS), 63_000, 300, 1e-4, "ontonotes"),
    "ptb_pos": ("tagging", 45, 44_000, 300, 3e-4, "ptb_pos"),
}


def get_config(arg: str = "sst"):
  """arg: '<dataset>[:domain][,crf][,tiny]'."""
  parts = arg.split(",")
  dataset, _, domain = parts[0].partition(":")
  flags = set(parts[1:])
  if dataset not in DATASETS or flags - {"crf", "tiny"}:
    raise ValueError(f"config arg {arg!r}: expected one of {sorted(DATASETS)} (mtl16:<domain>)"
                     " optionally followed by ',crf' and/or ',tiny'")
  if (dataset == "mtl16") != bool(domain) or (domain and domain not in MTL16_DOMAINS):
    raise ValueError(f"config arg {arg!r}: mtl16 needs a domain from {MTL16_DOMAINS}")
  if "crf" in flags and dataset not in ("conll03", "ontonotes"):
    raise ValueError("',crf' applies to conll03 and ontonotes")
  task, num_classes, vocab, width, lr, data_name = DATASETS[dataset]

  c = base_config()
  c.task.name = "crf_tagging" if "crf" in flags else task
  c.task.num_classes = num_classes
  c.task.vocab_size = vocab  # Kept equal to model.vocab_size.
  c.task.head_hidden_dim = 200  # The authors' classifier MLP width (cls_hidden 200).
  c.task.head_dropout = 0.4 if dataset in ("sst", "mtl16") else 0.1
  if dataset == "conll03":
    c.task.tag_names = CONLL03_TAGS  # Tag ids in this order (the loader must agree).
  elif dataset == "ontonotes":
    c.task.tag_names = ONTONOTES_TAGS  # BIO over the 18 OntoNotes entity types.

  c.data.name = data_name  # Local loader (comes with the data issue).
  c.data.path = f"data/{data_name}"  # Override with --config.data.path.
  c.data.max_len = 256  # Paper: sequences longer than 256 are truncated.
  c.data.domain = domain  # MTL-16 only: which of the 16 domains.
  c.data.batch_size = 128 if dataset == "snli" else 32
  c.data.eval_batch_size = 128

  c.model.input = "tokens"
  c.model.vocab_size = vocab  # Table 1 |V| (MTL-16: the largest domain's).
  c.model.d_model = width  # Table 1 H DIM: 300 (SNLI 600).
  c.model.embed_dropout = 0.4 if dataset in ("sst", "mtl16") else 0.1
  c.model.encoder = encoder_config(
      "star_transformer",
      num_cycles=2,  # The authors' default number of layers.
      num_heads=6,  # Table 1: 6 heads of width H DIM / 6 = 50 (SNLI 100).
      ends="ring",  # The paper's ring (first and last tokens are neighbours).
      ordering="paper",  # attention -> ReLU -> LayerNorm (Eq. 5-8).
      pooling="relay_plus_max",  # s^T + max(H^T) (Sec. 5.2/5.3).
      dropout_rate=0.1,
      max_len=256,
  )

  c.optim.learning_rate = lr  # Authors' defaults: 1e-4 (POS 3e-4).
  c.optim.warmup_steps = 500  # The authors' advice against instability.
  c.optim.weight_decay = 5e-5 if dataset == "sst" else 0.0
  c.optim.clip_norm = 5.0  # Authors' gradient clipping.
  c.train.num_steps = 20_000 if dataset in ("snli", "ontonotes", "ptb_pos") else 6_000
  c.train.eval_every = 500
  c.train.checkpoint_every = 500
  c.train.best_metric = {"classification": "accuracy", "pair_classification": "accuracy",
                         "span_tagging": "span_f1", "crf_tagging": "span_f1",
                         "tagging": "token_accuracy"}[c.task.name]
  c.train.best_mode = "max"
  if "tiny" in flags:  # Seconds on a CPU.
    c.model.d_model = 24
    c.model.encoder.num_heads = 2  # (width 24 = 2 x 12)
    c.task.head_hidden_dim = 16
    c.data.batch_size = 8
    c.data.eval_batch_size = 8
    c.optim.warmup_steps = 2
    c.train.num_steps = 20
    c.train.log_every = 5
    c.train.eval_every = 10
    c.train.checkpoint_every = 10
  return c
