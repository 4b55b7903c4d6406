"""Star-Transformer on the paper's datasets with its Table 1 settings (300-d, 6 heads x 50).

arg = '<dataset>[,crf][,tiny][,encoder=<name>]' with dataset one of sst, mtl16:<domain> (e.g. mtl16:books),
snli, conll03, ontonotes, ptb_pos. ',crf' adds the linear-chain CRF to conll03/ontonotes;
',tiny' is a seconds-long CPU smoke run (needs the data all the same).

Data (nothing is downloaded): SNLI from prepared TFDS data (``snli``, examples without a
gold label dropped); the others from local files under ``data/``:
``sst/{train,test}.jsonl`` and ``mtl16/<domain>.{train,test}.jsonl`` ({"text", "label"}), and
CoNLL column files ``conll2003/{train,test}.txt``, ``ontonotes/{train,test}.conll`` (tag in the
last column) and ``ptb_pos/{train,test}.txt`` (``word tag``); docs/data.md has the recipes.
``--config.data.train_path`` / ``--config.data.eval_path`` point anywhere else. Tokens are
UTF-8 bytes by default; for word-level vocabularies like the paper's, train a SentencePiece
model (``python -m longtext_jax.tokenize train``) and set ``data.tokenizer.kind/path``.

Launch:
  python -m longtext_jax.main --config=configs/star/star_transformer.py:sst \
      --workdir=runs/star_sst
  python -m longtext_jax.main --config=configs/star/star_transformer.py:mtl16:books \
      --workdir=runs/star_mtl16_books
  python -m longtext_jax.main --config=configs/star/star_transformer.py:snli \
      --workdir=runs/star_snli --config.data.tfds_data_dir=/data/tfds
  python -m longtext_jax.main --config=configs/star/star_transformer.py:conll03,crf \
      --workdir=runs/star_conll03_crf --config.data.train_path=/data/conll2003/train.txt \
      --config.data.eval_path=/data/conll2003/test.txt
"""
from configs import common
from longtext_jax.config import encoder_config

MTL16_DOMAINS = ("apparel", "baby", "books", "camera", "dvd", "electronics", "health",
                 "imdb", "kitchen", "magazines", "mr", "music", "software", "sports",
                 "toys", "video")
CONLL03_TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC",
                "I-MISC")
ONTONOTES_TYPES = ("PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT",
                   "WORK_OF_ART", "LAW", "LANGUAGE", "DATE", "TIME", "PERCENT", "MONEY",
                   "QUANTITY", "ORDINAL", "CARDINAL")
ONTONOTES_TAGS = ("O",) + tuple(f"{k}-{t}" for t in ONTONOTES_TYPES for k in ("B", "I"))

# dataset -> (task, classes, vocab |V| of Table 1, H DIM, lr, files under data_dir)
DATASETS = {
    "sst": ("classification", 5, 20_000, 300, 1e-4, "sst/{split}.jsonl"),
    "mtl16": ("classification", 2, 28_000, 300, 1e-4, "mtl16/{domain}.{split}.jsonl"),
    "snli": ("pair_classification", 3, 34_000, 600, 1e-4, None),  # TFDS 'snli'.
    "conll03": ("span_tagging", len(CONLL03_TAGS), 25_000, 300, 1e-4,
                "conll2003/{split}.txt"),
    "ontonotes": ("span_tagging", len(ONTONOTES_TAGS), 63_000, 300, 1e-4,
                  "ontonotes/{split}.conll"),
    "ptb_pos": ("tagging", 45, 44_000, 300, 3e-4, "ptb_pos/{split}.txt"),
}


ARGS = dict(positional=[common.Positional(
    "dataset", [d for d in DATASETS if d != "mtl16"] + [f"mtl16:{d}" for d in MTL16_DOMAINS])],
            flags=("crf", "tiny"))


def get_config(arg: str = "sst"):
  """arg: '<dataset>[:domain][,crf][,tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg, **ARGS)
  dataset, _, domain = args["dataset"].partition(":")
  if args["crf"] and dataset not in ("conll03", "ontonotes"):
    raise ValueError("',crf' applies to conll03 and ontonotes")
  task, num_classes, vocab, width, lr, files = DATASETS[dataset]

  c = common.experiment()
  c.task.name = "crf_tagging" if args["crf"] else task
  c.task.num_classes = num_classes
  c.task.vocab_size = vocab  # Kept equal to model.vocab_size.
  c.task.head_hidden_dim = 200  # The authors' classifier MLP width (cls_hidden 200).
  c.task.head_dropout = 0.4 if dataset in ("sst", "mtl16") else 0.1
  if dataset == "conll03":
    c.task.tag_names = CONLL03_TAGS  # Tag ids in this order (the loader must agree).
  elif dataset == "ontonotes":
    c.task.tag_names = ONTONOTES_TAGS  # BIO over the 18 OntoNotes entity types.

  if files is None:  # SNLI through TFDS (premise/hypothesis preset), no TensorFlow.
    c.data.name = "tfds"
    c.data.tfds_name = "snli"
    c.data.tfds_eval_split = "test"
    c.data.max_examples = 600_000  # In memory (all of it), so that ...
    c.data.skip_labels = (-1,)  # ... the examples without a gold label can be dropped.
  else:
    c.data.name = "local"  # longtext_jax/data/local_files.py
    c.data.train_path = "data/" + files.format(domain=domain, split="train")
    c.data.eval_path = "data/" + files.format(domain=domain, split="test")
    c.data.format = "conll" if "tagging" in task else "jsonl"
    c.data.label_names = c.task.tag_names  # Tag ids in the task's order.
  c.data.add_special_tokens = False  # Star reads the text itself (pairs: token_type_ids).
  c.data.max_tokens = 256  # Paper: sequences longer than 256 are truncated.
  # Batches padded to a multiple of 32 tokens: 8 batch lengths up to 256, so the steps
  # compile 8 times at most (every length its own program otherwise; the model is
  # invariant to padding).
  c.data.pad_multiple = 32
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
  if args["tiny"]:  # Seconds on a CPU.
    common.tiny(c, 20, 10, log_every=5, warmup_steps=2, model__d_model=24,
                model__encoder__num_heads=2,  # (width 24 = 2 x 12)
                task__head_hidden_dim=16, data__batch_size=8, data__eval_batch_size=8)
  common.apply_encoder_option(c, args)
  return c
