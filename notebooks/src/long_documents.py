# %% [markdown]
# # Long documents with RAN
#
# Trains a tiny Recurrent Attention Network on a generated long-document task whose label is
# decided by one marker token in the document's **last window**, so the global perception
# cell (GPC) must carry it across windows. Then it reads documents 32x longer than any it
# was trained on, streaming them in pieces (the result equals the one-shot encoding), and
# shows where the memory goes as documents grow: RAN against full attention. A few minutes
# on a CPU; on Colab pick any runtime (a GPU/TPU just makes it faster).

# %% [install]

# %%
# %matplotlib inline
import os, tempfile
import jax, jax.numpy as jnp, numpy as np
from longtext_jax import plot, train
from longtext_jax.config import base_config, encoder_config

config = base_config()
config.task.name, config.task.num_classes = "classification", 4
config.data.name, config.data.task = "long_tasks", "last_window"  # longtext_jax/data/long_tasks.py
config.data.seq_len, config.data.min_len, config.data.window = 64, 40, 8  # 5-8 windows of 8
config.data.vocab_size = config.model.vocab_size = config.task.vocab_size = 24
config.data.num_train, config.data.num_eval = 512, 64
config.data.batch_size, config.data.eval_batch_size = 16, 32
config.model.input, config.model.d_model = "tokens", 32
config.model.encoder = encoder_config("ran", num_layers=2, num_heads=2, window_size=8,
                                      dropout_rate=0.0)  # Layout: the backend's fastest.
config.optim.learning_rate, config.optim.warmup_steps = 3e-3, 10
config.train.num_steps, config.train.log_every, config.train.eval_every = 150, 25, 75
config.train.progress_bar = False
config.lock()  # A misspelt field is now an error.

workdir = tempfile.mkdtemp(prefix="ran_nb_")
final = train.train_and_evaluate(config, workdir)
print("RAN eval accuracy:", round(final["accuracy"], 3), "(chance: 0.25)")
plot.plot_runs([workdir], labels=["RAN, label in the last window"])

# %% [markdown]
# ## Streaming a document longer than training saw
#
# Training saw documents of at most 64 tokens. The trained weights are read back from the
# run's last checkpoint, and 2,048-token documents of the same task (the marker again in
# the last window) are classified in one call. `RAN` keeps what later windows need (the
# GPC, the memory of past GPCs for memory review, the pooling sums) in an explicit state,
# so a document too long for memory can also be fed in chunks (a multiple of the window):
# `stream_encode` drives the passes, and the result equals the one-shot call.

# %%
import orbax.checkpoint as ocp
from longtext_jax import model as model_lib
from longtext_jax.data import long_tasks
from longtext_jax.encoders import EncoderOutput
from longtext_jax.encoders.ran import stream_encode

manager = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"))
restored = manager.restore(manager.latest_step(),
                           args=ocp.args.Composite(state=ocp.args.StandardRestore()))
params = restored["state"]["params"]
model = model_lib.build_model(config)

LONG = 2048  # 32x the training length.
docs = long_tasks.generate("last_window", 64, LONG, LONG // 2, config.data.window,
                           config.data.vocab_size, config.task.num_classes, seed=7)
logits = jax.jit(lambda p, b: model.apply({"params": p}, b)["logits"])(
    params, {"input_ids": docs["input_ids"], "mask": docs["mask"]})
print(f"accuracy on {LONG}-token documents:",
      float(np.mean(np.argmax(logits, -1) == docs["label"])))

# One document in chunks of 256 tokens, through the trained encoder.
ids_1L, mask_1L = docs["input_ids"][:1], docs["mask"][:1]
x_1LD = params["inputs"]["embed"]["embedding"][ids_1L]
ran = model_lib.build_encoder(config.model.encoder)
chunks = lambda: ((x_1LD[:, i:i + 256], mask_1L[:, i:i + 256]) for i in range(0, LONG, 256))
pieces, pooled = stream_encode(ran, {"params": params["encoder"]}, chunks, batch_size=1,
                               d_model=config.model.d_model, max_len=LONG)
one_shot = ran.apply({"params": params["encoder"]}, x_1LD, mask_1L)
head_logits = model.apply({"params": params},
                          EncoderOutput(sequence=jnp.concatenate(pieces, 1), pooled=pooled),
                          method=lambda m, enc: m.head(enc, deterministic=True))
print("streaming == one-shot:",
      bool(jnp.allclose(jnp.concatenate(pieces, 1), one_shot.sequence, atol=1e-4)),
      bool(jnp.allclose(pooled, one_shot.pooled, atol=1e-4)))
print("streamed prediction:", int(jnp.argmax(head_logits[0])), "label:", int(docs["label"][0]))

# %% [markdown]
# ## Where the memory goes as documents grow
#
# XLA's own accounting of the compiled forward pass (`compiled.memory_analysis()`:
# arguments + outputs + temporaries; nothing is run, so lengths beyond this machine's memory
# can be asked about too). Full attention builds an L x L score matrix per head: quadratic.
# RAN attends inside windows plus the GPC: linear. Streaming compiles one chunk step whose
# memory does not depend on the document's length (its state holds one GPC per window
# for memory review: tiny next to the activations).

# %%
from matplotlib.figure import Figure
from longtext_jax.encoders import Transformer
from longtext_jax.train import benchmark

D, CHUNK = 64, 512
big_ran = model_lib.build_encoder(encoder_config("ran", num_layers=2, num_heads=4,
                                                 window_size=128))
full = Transformer(num_layers=2, num_heads=4)
spec = lambda *shape, dtype=jnp.float32: jax.ShapeDtypeStruct(shape, dtype)
init = lambda m: jax.eval_shape(m.init, jax.random.key(0), spec(1, CHUNK, D),
                                spec(1, CHUNK, dtype=bool))
ran_vars, full_vars = init(big_ran), init(full)


def forward_memory(module, variables, length):
  """Compiled forward memory in MiB: total and its parts."""
  compiled, _ = benchmark.compile_fn(lambda v, x, m: module.apply(v, x, m).pooled,
                                     (variables, spec(1, length, D), spec(1, length, dtype=bool)))
  return {k: (v or 0) / 2**20 for k, v in benchmark.memory(compiled).items()}


def chunk_memory(length):
  """Compiled memory of one streaming step (a CHUNK-token piece of a `length` document)."""
  state = jax.eval_shape(lambda v: big_ran.apply(v, 1, D, length, method=type(big_ran).init_stream),
                         ran_vars)
  step = lambda v, x, m, s: big_ran.apply(v, x, m, s, 0, method=type(big_ran).encode_chunk)
  compiled, _ = benchmark.compile_fn(step, (ran_vars, spec(1, CHUNK, D),
                                            spec(1, CHUNK, dtype=bool), state))
  return {k: (v or 0) / 2**20 for k, v in benchmark.memory(compiled).items()}


lengths = [1024, 2048, 4096, 8192, 16384]
rows = {"transformer": [forward_memory(full, full_vars, n) for n in lengths[:4]],
        "ran": [forward_memory(big_ran, ran_vars, n) for n in lengths],
        "ran streaming (one chunk step)": [chunk_memory(n) for n in lengths]}
styles = plot.styles_for(["transformer", "ran", "ran_scan"])
styles["ran streaming (one chunk step)"] = styles.pop("ran_scan")
fig = Figure(figsize=(11, 4), layout="constrained")
ax, parts_ax = fig.subplots(1, 2)
for name, mems in rows.items():
  ax.plot(lengths[:len(mems)], [m["mem_bytes"] for m in mems], label=name, **styles[name])
plot.set_length_ticks(ax, lengths)
ax.set(yscale="log", xlabel="document length L (tokens)", ylabel="compiled memory (MiB)",
       title=f"forward pass, D={D}, 2 layers, batch 1")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8)
bottom = np.zeros(len(lengths))
for part, colour in (("argument_bytes", "tab:gray"), ("output_bytes", "tab:olive"),
                     ("temp_bytes", "tab:green")):
  values = np.array([m[part] for m in rows["ran"]])
  parts_ax.bar([str(n) for n in lengths], values, bottom=bottom, color=colour,
               label=part.replace("_bytes", "s").replace("temps", "temporaries (activations)"))
  bottom += values
parts_ax.set(xlabel="document length L (tokens)", ylabel="MiB",
             title="RAN one-shot: where the memory goes")
parts_ax.legend(fontsize=8)
for name, mems in rows.items():
  print(f"{name:>32}: " + ", ".join(f"{n}: {m['mem_bytes']:.1f}" for n, m in zip(lengths, mems)))
fig
