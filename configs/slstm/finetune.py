"""Fine-tune a pretrained S-LSTM (configs/slstm/pretrain.py) for classification on g.

The encoder and input embedding are copied from the pretraining run (``config.init_from``:
the 'inputs' and 'encoder' parameter subtrees; a shape or architecture mismatch is an error),
the classification head on the sentence node g is fresh. Sentence pairs are encoded as
``<s> A </s> B </s>`` with the pretraining tokenizer (the batch also carries
``token_type_ids``, which the S-LSTM does not read: the paper's input has no segment ids).

arg = '<task>[,<variant>][,tiny][,encoder=<name>]', variant = the pretraining variant (paper | paper24,
default paper; ',tiny' = configs/slstm/pretrain.py's tiny model and a seconds-long run), task
one of
  GLUE (TSV files of the GLUE distribution under config.data.data_dir/<TASK>/):
    cola (Matthews correlation), sst2, mrpc, qqp, mnli (dev_matched), qnli, rte
  Chinese, CLUE-style files under config.data.data_dir/<task>/ (train/dev .json lines or .tsv):
    tnews, iflytek, csl, lcqmc, chnsenticorp, thucnews
  pydoc_pairs: next-chunk prediction on Python's documentation topics (present everywhere;
    the demo and the test of the pretrain -> fine-tune path).
Settings as in Sec. 3.2: Adam, lr in {2e-5, 3e-5, 5e-5}, batch in {16, 32, 64}, epochs in
{2, 3, 5, 10}; here 3 epochs at batch 32 and lr 3e-5, warmup 10% then linear decay.

Launch:
  python -m longtext_jax.main --config=configs/slstm/finetune.py:cola,paper \
      --workdir=runs/slstm_cola --config.init_from.path=runs/slstm_pt \
      --config.data.data_dir=/data/glue --config.data.tokenizer.path=runs/spm/en.model
  python -m longtext_jax.main --config=configs/slstm/finetune.py:pydoc_pairs,tiny \
      --workdir=/tmp/slstm_ft --config.init_from.path=/tmp/slstm_pt \
      --config.data.tokenizer.path=<the tiny run's tokenizer .model>
"""
import math
import os

from configs import common
from configs.slstm import pretrain

# name: (sub-folder, train file, eval file, text_a, text_b, label, label_names, columns,
#        approximate number of training examples)
GLUE = {
    "cola": ("CoLA", "train.tsv", "dev.tsv", "sentence", "", "label", (),
             ("source", "label", "original_label", "sentence"), 8551),
    "sst2": ("SST-2", "train.tsv", "dev.tsv", "sentence", "", "label", (), (), 67349),
    "mrpc": ("MRPC", "train.tsv", "dev.tsv", "#1 String", "#2 String", "Quality", (), (),
             3668),
    "qqp": ("QQP", "train.tsv", "dev.tsv", "question1", "question2", "is_duplicate", (), (),
            363846),
    "mnli": ("MNLI", "train.tsv", "dev_matched.tsv", "sentence1", "sentence2", "gold_label",
             ("contradiction", "entailment", "neutral"), (), 392702),
    "qnli": ("QNLI", "train.tsv", "dev.tsv", "question", "sentence", "label",
             ("entailment", "not_entailment"), (), 104743),
    "rte": ("RTE", "train.tsv", "dev.tsv", "sentence1", "sentence2", "label",
            ("entailment", "not_entailment"), (), 2490),
    # CLUE-style Chinese classification (JSON lines as distributed by CLUE; TSV otherwise).
    "tnews": ("tnews", "train.json", "dev.json", "sentence", "", "label",
              tuple(str(v) for v in (100, 101, 102, 103, 104, 106, 107, 108, 109, 110, 112,
                                     113, 114, 115, 116)), (), 53360),
    "iflytek": ("iflytek", "train.json", "dev.json", "sentence", "", "label",
                tuple(str(v) for v in range(119)), (), 12133),
    "csl": ("csl", "train.json", "dev.json", "keyword", "abst", "label", ("0", "1"), (),
            20000),
    "lcqmc": ("lcqmc", "train.tsv", "dev.tsv", "text_a", "text_b", "label", ("0", "1"),
              ("text_a", "text_b", "label"), 238766),
    "chnsenticorp": ("chnsenticorp", "train.tsv", "dev.tsv", "text_a", "", "label",
                     ("0", "1"), (), 9600),
    "thucnews": ("thucnews", "train.tsv", "dev.tsv", "text", "", "label",
                 ("体育", "财经", "房产", "家居", "教育", "科技", "时尚", "时政", "游戏", "娱乐"),
                 ("label", "text"), 50000),
}
CHINESE = ("tnews", "iflytek", "csl", "lcqmc", "chnsenticorp", "thucnews")


ARGS = dict(positional=[common.Positional("task", tuple(GLUE) + ("pydoc_pairs",)),
                       common.Positional("variant", ("paper", "paper24"), "paper")])


def get_config(arg: str = "pydoc_pairs,tiny"):
  """arg: '<task>[,<variant>][,tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg, **ARGS)
  task = args["task"]
  # The same model as the pretraining run (so its parameters can be copied), new task/data.
  c = pretrain.get_config("tiny" if args["tiny"] else args["variant"])
  c.init_from.path = ""  # The pretraining workdir (required to start from pretrained weights).
  c.init_from.modules = ("inputs", "encoder")  # Copied; the head is freshly initialised.
  c.model.encoder.dropout_rate = 0.1  # Fine-tuning dropout on h and g (shapes unchanged).
  common.experiment(
      c,
      # Softmax over the classes from the sentence node g.
      task=dict(name="classification", head_dropout=0.1),
      data=dict(seq_len=128,  # <s> A </s> B </s> cut longest-first to this length.
                batch_size=32, eval_batch_size=128),
      optim=dict(learning_rate=3e-5, schedule="linear", weight_decay=0.01),
      train=dict(best_metric="accuracy", best_mode="max"))
  epochs = 3

  if task == "pydoc_pairs":
    # Is B the chunk after A in the same document? Chunks of 24 words; 0 = all pairs.
    common.experiment(c, data=dict(name="pydoc_pairs", chunk_words=24, num_train=0,
                                   num_eval=0), task=dict(num_classes=2))
    num_train = 3000
  else:
    folder, train_file, eval_file, text_a, text_b, label, names, columns, num_train = GLUE[task]
    common.experiment(
        c,
        data=dict(name="local",  # GLUE/CLUE TSV or JSON-lines files (data/local_files.py).
                  data_dir="",  # Root folder of the task folders (GLUE / CLUE layout).
                  train_path=os.path.join("{data_dir}", folder, train_file),
                  eval_path=os.path.join("{data_dir}", folder, eval_file),
                  text_field=text_a, text_pair_field=text_b, label_field=label,
                  label_names=names,  # Label strings in id order (empty: integer labels).
                  columns=columns,  # Column names of a headerless TSV (empty: header row).
                  skip_unlabeled=True,  # Drop rows without a gold label (MNLI's '-').
                  on_empty="keep"),  # An empty text is encoded as <s> </s>, not an error.
        task=dict(num_classes=len(names) if names else 2))
    if task in CHINESE:
      c.data.seq_len = 512 if task == "thucnews" else 256
    if task == "cola":
      c.train.best_metric = "mcc"  # Matthews correlation (GLUE's CoLA metric).
  steps = epochs * math.ceil(num_train / c.data.batch_size)
  every = max(1, steps // 6)
  common.experiment(c, optim=dict(warmup_steps=steps // 10),
                    train=common.steps(steps, every, log_every=min(100, every)))
  if args["tiny"]:
    common.tiny(c, 60, 30, data__seq_len=64, data__batch_size=16, data__eval_batch_size=64,
                model__encoder__dropout_rate=0.0, optim__learning_rate=1e-3)
    if task == "pydoc_pairs":
      c.data.num_train, c.data.num_eval = 512, 128
  if task != "pydoc_pairs":  # Rows cut longest-first to seq_len and padded to it.
    c.data.max_tokens = c.data.seq_len
    c.data.pad_multiple = c.data.seq_len
  common.apply_encoder_option(c, args)
  return c
