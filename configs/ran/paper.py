"""RAN with the paper's table settings (Tables 1-3): runs when the dataset is present.

AG News and CoNLL-2003 are read from prepared TFDS data (``tfds.data_source``, no
TensorFlow); the others from local files converted as docs/data.md describes (set
``--config.data.train_path`` / ``--config.data.eval_path``; empty paths are an error that
says so). Tokens are UTF-8 bytes by default (no tokenizer file needed); for the paper's
subword setting train one (``python -m longtext_jax.tokenize train ...``) and pass
``--config.data.tokenizer.kind=sentencepiece --config.data.tokenizer.path=<.model>``.
Settings from the paper (Sec. 4.2) and the authors' notes (../shared/reference/official-implementations.md Sec. 1): 2 RAN layers,
window 256 for classification and LM and 64 for NER, 12 heads, width 768, Adam, lr 3e-4
from scratch (2e-5 when fine-tuning a pretrained RAN: --config.optim.learning_rate=2e-5
--config.init_from.path=<MLM run>).

Documents are cut at the dataset's L tokens (``data.max_tokens``; DATASETS below), except
WikiText-103's articles, which are split into consecutive pieces of at most L tokens
(``data.long_documents='split'``): every token of every article is trained and evaluated
on, each piece read on its own.

arg = '<dataset>[,tiny][,encoder=<name>]' with dataset a key of DATASETS.

Launch:
  python -m longtext_jax.main --config=configs/ran/paper.py:arxiv --workdir=runs/ran_arxiv \
      --config.data.train_path=/data/arxiv/train --config.data.eval_path=/data/arxiv/test
  python -m longtext_jax.main --config=configs/ran/paper.py:conll2003 --workdir=runs/ran_conll
"""
from configs import common
from configs.ran.long_tasks import ran_encoder

# dataset -> (task, classes or tags, max tokens L, window W, metric, paper's Table)
DATASETS = {
    "agnews": ("classification", 4, 512, 256, "accuracy"),  # Table 1, short texts
    "20newsgroups": ("classification", 20, 4096, 256, "accuracy"),  # Table 1
    "arxiv": ("classification", 11, 4096, 256, "accuracy"),  # Table 1 (He et al. 2019)
    "book_summary": ("multilabel", 227, 4096, 256, "micro_f1"),  # Table 1 (Park et al.)
    "eurlex57k": ("multilabel", 4271, 4096, 256, "micro_f1"),  # Table 1
    "hyperpartisan": ("binary", 2, 4096, 256, "accuracy"),  # Table 1
    "wikitext103": ("lm", 0, 2048, 256, "loss"),  # Table 2 (perplexity = exp(loss))
    "conll2003": ("tagging", 9, 512, 64, "token_accuracy"),  # Table 3 (paper: span F1 by conlleval)
    "ontonotes5": ("tagging", 37, 512, 64, "token_accuracy"),  # Table 3
}

# dataset -> where its data comes from: ('tfds', TFDS name) or ('local', file format).
SOURCES = {
    "agnews": ("tfds", "ag_news_subset"),
    "conll2003": ("tfds", "conll2003"),
    "20newsgroups": ("local", "jsonl"),
    "arxiv": ("local", "text_dir"),  # One sub-folder per subject class.
    "book_summary": ("local", "jsonl"),
    "eurlex57k": ("local", "jsonl"),
    "hyperpartisan": ("local", "jsonl"),
    "wikitext103": ("local", "text_dir"),  # One article per file.
    "ontonotes5": ("local", "conll"),
}


def get_config(arg: str = "arxiv"):
  """arg: '<dataset>[,tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg, [common.Positional("dataset", DATASETS, "arxiv")])
  task, classes, max_len, window, metric = DATASETS[args["dataset"]]
  kind, where = SOURCES[args["dataset"]]
  c = common.experiment(
      task=dict(name=task, num_classes=max(classes, 2)),  # Labels / tags.
      # tfds: fields preset in longtext_jax.data.tfds_source.PRESETS; local: files from the
      # docs/data.md recipes (set train_path/eval_path). Documents cut at L tokens
      # (data.max_tokens: the local and TFDS sources read no seq_len; before 4 Dec 2026 they
      # stayed whole) and batches padded to whole windows: L / W lengths, one program each.
      data=dict(name=kind, seq_len=max_len, max_tokens=max_len, batch_size=16,
                pad_multiple=window,
                **(dict(tfds_name=where) if kind == "tfds" else dict(format=where))),
      # vocab >= the tokenizer's (bytes: 261; a SentencePiece model: its size); width 768.
      model=dict(input="tokens", vocab_size=32000, d_model=768, embed_dropout=0.1,
                 encoder=ran_encoder(
                     num_heads=12,  # Paper Sec. 4.2.
                     window_size=window,  # 256 (TC, LM) or 64 (NER).
                     mask_type="causal" if task == "lm" else "bidirectional")),
      optim=dict(learning_rate=3e-4,  # Paper: non-pretrained RAN.
                 weight_decay=0.0, warmup_steps=1000),  # Adam.
      train=common.steps(50_000, 2000, best_metric=metric, best_mode="min" if metric == "loss" else "max"))
  c.task.vocab_size = c.model.vocab_size  # build_model checks they agree.
  if task == "lm":  # Whole articles, in pieces of L tokens (until 4 Dec 2026: cut at L).
    c.data.long_documents = "split"
  if args["tiny"]:  # The paper's model at CPU size (needs the data all the same).
    common.tiny(c, 20, 10, log_every=5, data__seq_len=256, data__max_tokens=256,
                data__batch_size=8,
                data__eval_batch_size=8, data__pad_multiple=min(window, 32),
                model__d_model=32, model__encoder__num_heads=2,
                model__encoder__window_size=min(window, 32))
  common.apply_encoder_option(c, args)
  return c
