# %% [markdown]
# # longtext_jax quickstart
#
# Train a tiny document classifier on text generated here, look at its training curves,
# evaluate it, then use it: predict the topic of two new documents and embed them as vectors.
# A few minutes on a CPU; on Colab any runtime works (Runtime > Change runtime type picks a
# GPU or TPU, which the install cell below keeps).

# %% [install]

# %% [markdown]
# ## A small corpus
#
# Three topics; each document mixes words of its topic with common filler words. Written as
# JSON lines (`{"text": ..., "label": ...}`), the layout the `local` data source reads (see
# docs/data.md: CSV, TSV and text folders work too).

# %%
# %matplotlib inline
import json, os, random, tempfile

TOPICS = {
    "sports": "match team goal coach season player score league referee stadium".split(),
    "cooking": "recipe oven flour butter sauce garlic onion dinner kitchen simmer".split(),
    "weather": "rain cloud storm wind forecast sunny snow thunder humid breeze".split(),
}
FILLER = "the a of and to in is was it for on that with as this by at from but".split()


def document(topic, rng):
  words = [rng.choice(TOPICS[topic] if rng.random() < 0.3 else FILLER)
           for _ in range(rng.randint(20, 60))]
  return " ".join(words)


rng = random.Random(0)
data_dir = tempfile.mkdtemp(prefix="quickstart_data_")
for split, n in (("train", 600), ("dev", 90)):
  with open(os.path.join(data_dir, f"{split}.jsonl"), "w") as f:
    for i in range(n):
      topic = sorted(TOPICS)[i % 3]
      f.write(json.dumps({"text": document(topic, rng), "label": topic}) + "\n")
print(open(os.path.join(data_dir, "train.jsonl")).readline()[:150], "...")

# %% [markdown]
# ## Train
#
# Every field of the config is in `longtext_jax/config.py` (`base_config`), with a comment.
# The config is locked: a misspelt field is an error. `train_and_evaluate` is the same
# trainer the command line runs (`python -m longtext_jax.main --config=... --workdir=...`).

# %%
from longtext_jax import train
from longtext_jax.config import base_config, encoder_config

config = base_config()
config.task.name, config.task.num_classes = "classification", 3
config.data.name, config.data.format = "local", "jsonl"
config.data.train_path = os.path.join(data_dir, "train.jsonl")
config.data.eval_path = os.path.join(data_dir, "dev.jsonl")
config.data.tokenizer.kind = "byte"            # UTF-8 bytes: no tokenizer file needed.
config.data.batch_size, config.data.eval_batch_size = 16, 32
config.data.max_tokens = 384                   # Longer documents are cut (none is here).
config.data.pad_multiple = 128                 # Few distinct batch shapes: few compilations.
config.model.input, config.model.d_model = "tokens", 64
config.model.vocab_size = 261                  # The byte tokenizer's vocabulary.
config.model.encoder = encoder_config("ran", num_layers=1, num_heads=2, window_size=16,
                                      dropout_rate=0.0)
config.optim.learning_rate, config.optim.warmup_steps = 3e-3, 10
config.train.num_steps, config.train.log_every, config.train.eval_every = 150, 10, 50
config.train.best_metric = "accuracy"          # Keep the best evaluation in workdir/best.
config.train.progress_bar = False
config.lock()

workdir = tempfile.mkdtemp(prefix="quickstart_run_")
final = train.train_and_evaluate(config, workdir)
print("final eval:", {k: round(v, 4) for k, v in final.items()})

# %% [markdown]
# ## Training curves
#
# `longtext_jax.plot` draws the train (solid) and eval (dashed) curves of one or more runs
# from their `metrics.jsonl`; from a shell: `python -m longtext_jax.plot --workdir=runs/x
# --workdir=runs/y --out=curves.png`. TensorBoard shows the same scalars plus the config:
# `tensorboard --logdir <workdir>`.

# %%
from longtext_jax import plot

plot.plot_runs([workdir], labels=["RAN"])

# %% [markdown]
# ## Use the model
#
# `inference.load` rebuilds the model from the workdir alone (config, label names,
# tokenizer, best checkpoint) and predicts documents of any length.

# %%
from longtext_jax import inference

predictor = inference.load(workdir)
report = predictor.evaluate(config.data.eval_path)
print("dev metrics:", {k: round(float(v), 4) for k, v in report["metrics"].items()})

new_documents = [
    "the storm came in with thunder and a cold wind and the forecast says more rain",
    "add the garlic and onion to the butter then simmer the sauce before dinner",
]
for text, prediction in zip(new_documents, predictor.predict(new_documents)):
  probs = dict(zip(sorted(TOPICS), [round(float(p), 3) for p in prediction["probabilities"]]))
  print(f"{prediction['label']:>8}  {probs}  <- {text[:50]}...")

# %%
import numpy as np

vectors = predictor.embed(new_documents)
print("embeddings:", vectors.shape, vectors.dtype)
unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
print("cosine similarity of the two documents:", round(float(unit[0] @ unit[1]), 3))

# %% [markdown]
# ## Any encoder as a plain Flax module
#
# Every encoder has the same call, `encoder(x_BLD, mask_BL, deterministic) -> EncoderOutput`
# (`sequence` float[B, L, D], zero on padding; `pooled` float[B, D]), so it drops into
# another Flax project.

# %%
import jax
import jax.numpy as jnp
from longtext_jax.encoders import Transformer

encoder = Transformer(num_layers=1, num_heads=2)
x_BLD = jax.random.normal(jax.random.key(0), (2, 10, 16))
mask_BL = jnp.arange(10)[None] < jnp.array([[10], [6]])
variables = encoder.init(jax.random.key(1), x_BLD, mask_BL)
out = encoder.apply(variables, x_BLD, mask_BL)
print(out.sequence.shape, out.pooled.shape)
