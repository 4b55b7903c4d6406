"""The benchmark harness (longtext_jax/train/benchmark.py) and the experiments/ scripts that
call it: each runs at tiny sizes and writes its outputs."""
import json
import os
import re
import statistics
import sys
import time

import jax
import pytest
import jax.numpy as jnp
import numpy as np

from conftest import ROOT, load_script
from longtext_jax import encoders
from longtext_jax import inference
from longtext_jax.train import benchmark as harness


@pytest.mark.parametrize("names", ["ran,bert", pytest.param("", marks=pytest.mark.long)])
def test_benchmark_smoke(tmp_path, monkeypatch, names):
  """experiments/benchmark.py --smoke produces its JSON, table and plot: for RAN and full
  BERT (fast), for every registered encoder and full BERT (long)."""
  bench = _experiment("benchmark")
  monkeypatch.setattr(bench, "ROOT", str(tmp_path / "repo"))  # Where its outputs default to.
  argv = ["--smoke"] + ([f"--encoders={names}"] if names else [])
  assert bench.main(argv) in (0, None)
  assert not (tmp_path / "repo" / "docs").exists()  # Smoke sizes stay out of the docs.
  out = tmp_path / "repo" / "runs" / "benchmark_smoke"
  result = json.load(open(out / "results.json"))
  rows = result["rows"]
  expected = set(names.split(",")) if names else set(encoders.ENCODERS) | {"bert"}
  assert {r["encoder"] for r in rows} == expected
  for row in rows:
    assert "skipped" not in row, row
    assert row["fwd_s"] > 0 and row["fwd_bwd_s"] > 0
    assert row["fwd_bwd_mem_bytes"] > 0
  assert result["meta"]["matmul_flops_per_s"] > 0
  table = open(out / "table.md").read()
  assert table.count("\n| ") == len(rows) + 1  # Header + one line per row.
  assert os.path.exists(out / "scaling.png")


def _experiment(name):
  """Imports experiments/<name>.py as a module."""
  return load_script(f"experiments/{name}.py")


def test_harness_measures_compile_memory_and_steady_time():
  """The harness's memory is XLA's (arguments + outputs + temporaries), grows with the
  input, and its time is the reduction of exactly ``repeats`` blocking calls."""
  f = lambda x: (jax.nn.softmax(x @ x.T, -1) @ x).sum(0)  # Attention: an [L, L] temporary.
  small = harness.measure(f, (jnp.ones((64, 32)),), repeats=4)
  large = harness.measure(f, (jnp.ones((512, 32)),), repeats=4)
  assert small["argument_bytes"] == 64 * 32 * 4 and small["output_bytes"] == 32 * 4
  assert small["mem_bytes"] >= small["argument_bytes"] + small["output_bytes"]
  assert large["temp_bytes"] >= 512 * 512 * 4 > small["temp_bytes"]
  assert len(small["times_s"]) == 4 and small["time_s"] == statistics.median(small["times_s"])
  assert small["compile_s"] > 0 and small["flops"] > 0
  sized = harness.measure(f, (jax.ShapeDtypeStruct((64, 32), jnp.float32),), run=False)
  assert sized["mem_bytes"] == small["mem_bytes"] and sized["time_s"] is None
  calls = []
  slow = lambda: calls.append(1) or time.sleep(0.05) or jnp.zeros(())
  assert harness.time_fn(slow, (), repeats=3, max_first_s=0.01) == (None, [])
  assert len(calls) == 1  # Stopped after the slow warm-up call.
  seconds, times = harness.time_interleaved({"a": (slow, ()), "b": (jnp.zeros, ((),))},
                                            repeats=2, reduce="min")
  assert len(times["a"]) == 2 and seconds["a"] == min(times["a"]) >= 0.05 > seconds["b"]


_INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 amx_tile

processor\t: 1
model name\t: something else
"""


def test_host_names_the_cpu_model_and_its_widest_vector_extension():
  """Benchmarks record the CPU model: the first processor's block of /proc/cpuinfo, its
  family/model and widest vector extension; an unreadable/empty cpuinfo still names the
  machine and the core count."""
  cores = f"{os.cpu_count()} cores"
  assert harness.host(_INTEL) == (
      f"Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (family 6 model 143, amx_tile), {cores}")
  amd = "model name\t: AMD EPYC\ncpu family\t: 25\nmodel\t: 1\nflags\t: sse2 avx avx2\n"
  assert harness.host(amd) == f"AMD EPYC (family 25 model 1, avx2), {cores}"
  assert harness.host("").endswith(cores) and not harness.host("").startswith(",")
  assert harness.host().endswith(cores)  # This machine's (any OS).


@pytest.mark.long  # Three scripts, each compiling several models (about 70 s of CPU).
def test_ran_star_slstm_benchmarks_tiny(tmp_path, capsys):
  """Each benchmark script runs at tiny sizes, prints one JSON row per case and writes its
  output file."""
  _experiment("ran_benchmark").main(
      ["--lengths=64", "--window=32", "--d_model=16", "--layers=1", "--heads=2",
       "--repeats=1", f"--out={tmp_path}/ran.json"])
  rows = json.load(open(tmp_path / "ran.json"))["rows"]
  assert [r["model"] for r in rows] == ["ran_parallel", "ran_scan", "windowed", "transformer"]
  assert all(r["time_s"] > 0 and r["mem_bytes"] > 0 for r in rows)
  _experiment("star_benchmark").main(
      ["--lengths=16,32", "--d_model=16", "--num_heads=2", "--layers=1", "--repeats=1",
       f"--out={tmp_path}/bench.md"])
  assert open(tmp_path / "bench.md").read().count("\n| 32 |") == 2  # infer and train.
  _experiment("slstm_benchmark").main(
      ["--d_model=16", "--steps=2", "--heads=2", "--lengths=16", "--repeats=1",
       f"--out={tmp_path}/slstm.json"])
  row = json.load(open(tmp_path / "slstm.json"))["rows"][0]
  assert row["slstm_train_s"] > 0 and row["tf_same_depth_train_temp_mib"] > 0
  printed = [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.startswith("{")]
  assert len(printed) == 4 + 2 * 2 * 2 + 1  # ran: 4 models; star: 2 L x 2 models x 2 modes.


@pytest.mark.long  # Two RAN programs and a streamed pass compiled: ~14 s of CPU.
def test_predict_benchmark_times_ran_whole_and_streamed(tmp_path, capsys):
  """experiments/predict_benchmark.py at tiny sizes: one row per (model, length); the
  streamed RAN (lengths above its chunk only) with its chunk and passes."""
  _experiment("predict_benchmark").main(
      ["--encoders=ran,ran_stream", "--lengths=512", "--d_model=32", "--repeats=1",
       "--stream_chunk=256", f"--out={tmp_path}/p.json"])
  rows = json.load(open(tmp_path / "p.json"))["rows"]
  assert [(r["model"], r["length"]) for r in rows] == [("ran", 512), ("ran_stream", 512)]
  assert all(r["docs_per_s"] > 0 and r["mem_bytes"] > 0 for r in rows)
  assert rows[-1]["stream_chunk"] == 256 and rows[-1]["passes"] == 3  # 2 layers + 1.
  assert len([l for l in capsys.readouterr().out.splitlines() if l.startswith("{")]) == 2


def test_predict_benchmark_chunk_bert_pads_whole_chunks_and_its_variant_does_not():
  """The side-by-side of docs/benchmarks.md: 'chunk_bert' buckets 510 pieces at 510 (4
  chunks with [CLS]/[SEP]), 'chunk_bert_multiple' (the padding before 25 Nov) at 512."""
  study = _experiment("predict_benchmark")
  for name, padded in (("chunk_bert", 510), ("chunk_bert_multiple", 512)):
    d = study.make_config(name, 256, 512).data
    assert inference.bucket_length(510, d.pad_multiple, 0, d.pad_offset) == padded


@pytest.mark.long  # Two RAN runs compiled: about 30 s of CPU.
def test_trainer_overhead_measures_trainer_and_bare_step(tmp_path):
  """experiments/trainer_overhead.py at tiny size: both measurements and their ratio."""
  rows = _experiment("trainer_overhead").main(
      ["--cases=ran_4k", "--tiny", "--warmup=2", "--steps=2", "--batches=1", "--repeats=1",
       f"--out={tmp_path}/o.json"])
  (row,) = json.load(open(tmp_path / "o.json"))["rows"]
  assert row == rows[0] and row["case"] == "ran_4k" and row["steps"] == 2
  assert row["trainer_steps_per_s"] > 0 and row["bare_steps_per_s"] > 0
  assert row["ratio"] == pytest.approx(row["trainer_steps_per_s"] / row["bare_steps_per_s"])


def test_trainer_overhead_chunkbert_text_config(tmp_path):
  """The ChunkBERT text case is the user's local config on the given corpus, counted in
  steps, every batch padded to 1,024 pieces (one compiled program); no corpus: an error."""
  study = _experiment("trainer_overhead")
  corpus = tmp_path / "train.jsonl"
  corpus.write_text('{"text": "a b", "label": "x"}\n')
  c = study.case_config("chunkbert_text", False, str(corpus))
  assert c.model.encoder.name == "chunk_bert" and c.data.train_path == str(corpus)
  assert (c.data.max_tokens, c.data.pad_multiple, c.data.batch_size) == (1024, 1024, 8)
  assert c.data.pad_offset == 0  # Every batch exactly 1,024 pieces (padded_length).
  # Training reads all 1,024 (the CPU default's cap of two chunks would halve the case).
  assert c.model.encoder.max_train_length >= 1024 + 2
  assert c.train.num_epochs == 0 and 0 < c.data.eval_fraction < 0.1
  with pytest.raises(FileNotFoundError, match="no corpus at"):
    study.case_config("chunkbert_text", True, str(tmp_path / "x"))


@pytest.mark.long  # Three tiny ChunkBERT compilations: about 30 s of CPU.
def test_trainer_overhead_chunkbert_text_case(tmp_path):
  """The ChunkBERT text case at tiny size: the trainer prepares the local corpus (tokenizer,
  label set, dev split) and the bare step is built from the same prepared config."""
  import own_corpus_data  # pylint: disable=import-outside-toplevel
  corpus = own_corpus_data.write_corpus(str(tmp_path / "corpus"), n_train=12)["train"]
  (row,) = _experiment("trainer_overhead").main(
      ["--cases=chunkbert_text", "--tiny", "--warmup=2", "--steps=2", "--batches=1",
       "--repeats=1", f"--corpus={corpus}"])
  assert row["case"] == "chunkbert_text" and row["batch_size"] == 8
  assert row["trainer_steps_per_s"] > 0 and row["bare_steps_per_s"] > 0


def test_profile_backward_maps_trace_ops_to_jax_ops():
  """experiments/profile_backward.py at a tiny size: both times, and the top ops of the
  gradient's trace found in the compiled HLO with the JAX operation they came from."""
  res = _experiment("profile_backward").main(
      ["--encoder=star_transformer", "--d_model=8", "--length=16", "--repeats=1", "--top=3"])
  assert res["fwd_cpu_s"] > 0 and res["fwd_bwd_cpu_s"] > 0
  assert 1 <= len(res["top"]) <= 3 and res["ops_ms"] > 0
  assert all(r["from"].startswith("jit(loss)") and r["shape"] and 0 < r["share"] <= 1
             for r in res["top"])
  assert [r["ms"] for r in res["top"]] == sorted((r["ms"] for r in res["top"]), reverse=True)


def test_recurrent_speed_rows_current_against_previous(tmp_path):
  """experiments/recurrent_speed.py at a tiny size: for each variant of the encoder (now and
  the pre-issue-20 oracle) compile time, compiled memory, CPU/wall time of the forward and
  forward+backward, and their ratio; the JSON records the command it was run with."""
  out = tmp_path / "rows.json"
  argv = ["--encoders=star_transformer,bilstm", "--cases=8x2x16", "--repeats=1",
          f"--out={out}"]
  assert _experiment("recurrent_speed").main(argv) == 0
  data = json.loads(out.read_text())
  assert data["meta"]["command"].endswith(" ".join(argv))
  assert data["meta"]["host"] == harness.host()
  assert [(r["encoder"], r["d_model"], r["batch"], r["length"]) for r in data["rows"]] == [
      ("star_transformer", 8, 2, 16), ("bilstm", 8, 2, 16)]
  for row in data["rows"]:
    for label in ("new", "old"):
      for mode in ("fwd", "fwd_bwd"):
        assert row[f"{label}_{mode}_cpu_s"] >= 0 and row[f"{label}_{mode}_wall_s"] > 0
        assert row[f"{label}_{mode}_mem_bytes"] > 0 and row[f"{label}_{mode}_compile_s"] > 0
      assert row[f"{label}_ratio_wall"] == pytest.approx(
          row[f"{label}_fwd_bwd_wall_s"] / row[f"{label}_fwd_wall_s"])
  # --repeats=0: compiled memory and compile time only, the same memory; nothing timed.
  argv0 = ["--encoders=star_transformer", "--cases=8x2x16", "--repeats=0", f"--out={out}"]
  assert _experiment("recurrent_speed").main(argv0) == 0
  (row0,) = json.loads(out.read_text())["rows"]
  assert not any(k.endswith(("_cpu_s", "_wall_s", "_ratio_cpu", "_ratio_wall")) for k in row0)
  for label in ("new", "old"):
    for mode in ("fwd", "fwd_bwd"):
      assert row0[f"{label}_{mode}_mem_bytes"] == data["rows"][0][f"{label}_{mode}_mem_bytes"]


def test_recurrent_speed_ran_pool_times_training_mode_losses():
  """The ran_pool rows differentiate RAN's training loss (dropout on, one fixed key): the
  pooled path reading the outputs before or after their dropout gives different losses,
  each the same on every call, and neither is the evaluation loss the other rows time."""
  study = _experiment("recurrent_speed")
  mods = study.variants("ran_pool", 24)
  x = jax.random.normal(jax.random.key(0), (2, 24, 8))
  mask = jnp.arange(24)[None] < jnp.array([[24], [13]])
  params = jax.jit(mods["pool_clean"].init)(jax.random.key(1), x, mask)
  losses = {k: jax.jit(study.loss_for("ran_pool", m)) for k, m in mods.items()}
  clean, dropped = (float(losses[k](params, x, mask)) for k in ("pool_clean", "pool_dropped"))
  assert clean != dropped
  assert float(losses["pool_clean"](params, x, mask)) == clean
  evaluation = float(jax.jit(study.loss_for("ran", mods["pool_clean"]))(params, x, mask))
  assert evaluation not in (clean, dropped)  # The dropout is on only in training mode.


def test_recurrent_speed_ran_blocks_rows_time_one_function_in_four_layouts():
  """The ran_blocks rows: the scan and the parallel form in blocks of 1, 4 and all windows
  (8 windows of 256 here, so 4 per block is a loop of 2), the same loss on one input."""
  study = _experiment("recurrent_speed")
  mods = study.variants("ran_blocks", 8)
  assert {k: m.layout for k, m in mods.items()} == {
      "scan": ("scan", 1), "parallel_block1": ("parallel", 1),
      "parallel_block4": ("parallel", 4), "parallel_block0": ("parallel", 0)}
  x = jax.random.normal(jax.random.key(0), (1, 8 * 256, 8))
  mask = jnp.arange(8 * 256)[None] < 7 * 256 + 5
  params = jax.jit(mods["scan"].init)(jax.random.key(1), x, mask)
  losses = [float(jax.jit(study.loss_for("ran_blocks", m))(params, x, mask))
            for m in mods.values()]
  np.testing.assert_allclose(losses, losses[0], rtol=1e-5)


def test_recurrent_speed_star_unroll_times_the_default_against_the_rolled_loop():
  """The star_unroll rows: the Star-Transformer's default (no loop over its 2 cycles)
  against scan_unroll=1, the same function on the same parameters."""
  study = _experiment("recurrent_speed")
  mods = study.variants("star_unroll", 16)
  assert (mods["unrolled"].unroll, mods["rolled"].unroll) == (2, 1)
  x = jax.random.normal(jax.random.key(0), (2, 16, 8))
  mask = jnp.arange(16)[None] < jnp.array([[16], [9]])
  params = jax.jit(mods["rolled"].init)(jax.random.key(1), x, mask)
  losses = [float(jax.jit(study.loss_for("star_unroll", m))(params, x, mask))
            for m in mods.values()]
  assert losses[0] == pytest.approx(losses[1], rel=1e-6)


@pytest.mark.parametrize("name,fewer", [("star_first_cycle", 4), ("star_shared_kv", 8)])
def test_recurrent_speed_star_first_cycle_times_the_default_against_the_scan(tmp_path, name,
                                                                             fewer):
  """The star_first_cycle rows: the default (a Python loop over the cycles, the first
  reusing its keys and values for the embedding slot) against the same cycles run by
  nn.scan; the same function on the same parameters, 4 fewer products in the gradient
  (star_shared_kv, with shared parameters: 8, the second cycle taking the first one's keys
  and values of the embeddings too)."""
  study = _experiment("recurrent_speed")
  mods = study.variants(name, 16)
  x = jax.random.normal(jax.random.key(0), (2, 16, 8))
  mask = jnp.arange(16)[None] < jnp.array([[16], [9]])
  params = jax.jit(mods["scan"].init)(jax.random.key(1), x, mask)
  grads, dots = {}, {}
  for label, m in mods.items():
    loss = study.loss_for(name, m)
    grads[label] = jax.jit(jax.grad(loss))(params, x, mask)
    for mode, f in (("fwd", loss), ("grad", jax.grad(loss))):
      hlo = jax.jit(f).lower(params, x, mask).compile().as_text()
      dots[label, mode] = len(re.findall(r"= f32\[[\d,]*\]\S* dot\(", hlo))
  # The same forward products (XLA merged the first cycle's two equal ones before); the
  # gradient without the embedding slot's input and weight gradients of k and v.
  assert dots["reuse", "fwd"] == dots["scan", "fwd"]
  assert dots["scan", "grad"] - dots["reuse", "grad"] == fewer
  for a, b in zip(jax.tree.leaves(grads["reuse"]), jax.tree.leaves(grads["scan"])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  out = tmp_path / "rows.json"
  assert study.main([f"--encoders={name}", "--cases=8x2x16", "--repeats=1",
                     f"--out={out}"]) == 0
  (row,) = json.loads(out.read_text())["rows"]
  assert row["reuse_ratio_cpu"] > 0 and row["scan_ratio_cpu"] > 0


def test_recurrent_speed_transformer_unroll_under_the_memory_scheduler(tmp_path):
  """The transformer_unroll rows: no loop over the layers against the loop (the default;
  the same function: test_baselines.py); --cpu_scheduler=memory compiles both with
  XLA:CPU's memory-optimized scheduler and says so in each row."""
  study = _experiment("recurrent_speed")
  mods = study.variants("transformer_unroll", 16, layers=3)
  assert (mods["unrolled"].scan_unroll, mods["rolled"].scan_unroll) == (3, 1)
  out = tmp_path / "rows.json"
  argv = ["--encoders=transformer_unroll", "--layers=3", "--cases=8x2x16", "--repeats=0",
          "--cpu_scheduler=memory", f"--out={out}"]
  assert study.main(argv) == 0
  (row,) = json.loads(out.read_text())["rows"]
  assert row["layers"] == 3 and row["cpu_scheduler"] == "memory"
  assert row["unrolled_fwd_bwd_mem_bytes"] > 0 and row["rolled_fwd_bwd_mem_bytes"] > 0


def test_remat_memory_rows_for_both_schedulers(tmp_path):
  """experiments/remat_memory.py at a tiny size (the scanned Transformer): every policy and
  scheduler has a temporary-memory figure and a time, and the scanned Transformer's full
  remat is below no remat."""
  out = tmp_path / "remat.json"
  assert _experiment("remat_memory").main(
      ["--encoders=transformer (", "--policies=none,full", "--batch=1", "--length=32",
       "--width=16", "--repeats=1", f"--out={out}"]) == 0
  data = json.loads(out.read_text())
  assert len(data["rows"]) == 1 and data["meta"]["command"].endswith(f"--out={out}")
  for row in data["rows"]:
    for sched in ("xla", "memory"):
      for policy in ("none", "full"):
        assert row[f"{sched}_{policy}_temp_mib"] > 0 and row[f"{sched}_{policy}_cpu_s"] >= 0
      assert f"{sched}_dots_temp_mib" not in row
  scanned = data["rows"][0]
  assert scanned["xla_full_temp_mib"] < scanned["xla_none_temp_mib"]


def test_chunkbert_memory_measures_both_programs():
  """chunkbert_memory's measure, on a tiny ChunkBERT: abstract params, two programs."""
  from longtext_jax.encoders.chunk_bert import ChunkBert  # pylint: disable=import-outside-toplevel
  study = _experiment("chunkbert_memory")
  module = ChunkBert(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2,
                     intermediate_size=32, chunk_size=8, num_filters=4, num_last_layers=2)
  out = study.measure(module, 30, 1)
  assert set(out) == {"forward", "train_grad"}
  assert out["train_grad"]["temp_MiB"] > 0 and out["forward"]["args_MiB"] > 0


def test_attention_cpu_times_old_and_new_attention_on_ops_and_a_train_step(tmp_path):
  """experiments/attention_cpu.py at tiny size: every op shape and the masked-summation
  Transformer's train step, both variants, with the speed-ups their times give; inside
  variant('old') the default attention is jax.nn.dot_product_attention and the Bert's is the
  batch-first form, inside 'new' neither, and both are restored after."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from longtext_jax.encoders import bert as bert_lib  # pylint: disable=import-outside-toplevel
  from longtext_jax.layers import attention  # pylint: disable=import-outside-toplevel
  study = _experiment("attention_cpu")
  calls = []
  real = jax.nn.dot_product_attention
  x = jnp.ones((1, 4, 2, 8))
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(jax.nn, "dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    with study.variant("new"):
      attention.dot_product_attention(x, x, x, None)
      assert bert_lib.heads_major_attention is attention.heads_major_attention
    assert not calls
    with study.variant("old"):
      attention.dot_product_attention(x, x, x, None)
      assert bert_lib.heads_major_attention is study._batch_first_layout  # pylint: disable=protected-access
    assert calls
  assert bert_lib.heads_major_attention is attention.heads_major_attention
  rows = study.main(["--tiny", "--repeats=1", "--batches=1", "--cases=msum_transformer",
                     f"--out={tmp_path}/a.json"])
  assert [r["case"] for r in rows] == [s[0] for s in study.OP_SHAPES] + ["msum_transformer"]
  saved = json.load(open(tmp_path / "a.json"))
  assert saved["rows"] == rows and saved["meta"]["jax"] == jax.__version__
  for r in rows:
    if r["kind"] == "op":
      assert r["fwd_bwd_speedup_cpu"] == pytest.approx(
          r["old_fwd_bwd_cpu_ms"] / r["new_fwd_bwd_cpu_ms"])
    else:
      assert r["speedup_cpu"] == pytest.approx(r["old_step_cpu_s"] / r["new_step_cpu_s"])
      assert r["tokens_per_batch"] > 0


def test_attention_cpu_compares_blocked_with_heads_major(tmp_path):
  """--compare heads_major,blocked: inside each variant the default attention is that form
  (at any size), outside it is the size's choice again; the op rows carry both forms' times
  and the compiled memory of their gradients, every shape of --shapes all included."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from longtext_jax.layers import attention  # pylint: disable=import-outside-toplevel
  study = _experiment("attention_cpu")
  calls = []
  x = jnp.ones((1, 4, 2, 8))
  with pytest.MonkeyPatch.context() as mp:
    real = attention.blocked_attention
    mp.setattr(attention, "blocked_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    with study.variant("heads_major"):
      attention.dot_product_attention(x, x, x, None)
    assert not calls
    with study.variant("blocked"):
      attention.dot_product_attention(x, x, x, None)
    assert calls
  assert attention.resolve_implementation(None, "cpu", 1) == "heads_major"
  rows = study.main(["--tiny", "--repeats=1", "--parts=ops", "--shapes=all",
                     "--compare=heads_major,blocked", f"--out={tmp_path}/b.json"])
  assert [r["case"] for r in rows] == [s[0] for s in study.OP_SHAPES + study.MORE_OP_SHAPES]
  for r in rows:
    assert r["compare"] == ["heads_major", "blocked"]
    assert r["heads_major_fwd_bwd_temp_mib"] > 0 and r["blocked_fwd_bwd_temp_mib"] > 0
    assert r["fwd_speedup_cpu"] == pytest.approx(
        r["heads_major_fwd_cpu_ms"] / r["blocked_fwd_cpu_ms"])
  with pytest.raises(SystemExit):
    study.main(["--tiny", "--compare=old"])


def test_benchmark_attention_impl_reaches_only_encoders_with_the_field():
  """--attention_impl sets the Transformer's attention (e.g. cuDNN on a GPU); encoders
  without the field are built as before."""
  bench = _experiment("benchmark")
  built = bench.build("transformer", jnp.float32, 32, 64, attention_impl="xla")
  assert built.attention_impl == "xla"
  assert bench.build("transformer", jnp.float32, 32, 64).attention_impl is None
  assert bench.build("ran", jnp.float32, 32, 64, attention_impl="xla") == bench.build(
      "ran", jnp.float32, 32, 64)


def test_ran_gpu_speed_compiles_first_then_times_after_its_wait_file(tmp_path):
  """experiments/ran_gpu_speed.py at a tiny size: every variant (scan and parallel at each
  unroll) compiled, timed only once the --wait file exists, the --done file created after;
  the rows carry each variant's speed against the rolled scan (unroll 1 only: compiles are
  most of the time; unrolled variants are the same code path with another field)."""
  import threading
  out, go, done = tmp_path / "rows.json", tmp_path / "go", tmp_path / "done"
  argv = ["--cases=16x1x32", "--unrolls=1", "--window=16", "--repeats=1",
          f"--wait={go}", f"--done={done}", "--wait_timeout_s=120", f"--out={out}"]
  timer = threading.Timer(1.0, go.touch)  # The go file appears while it compiles or waits.
  timer.start()
  try:
    assert _experiment("ran_gpu_speed").main(argv) == 0
  finally:
    timer.cancel()
  assert done.exists()
  data = json.loads(out.read_text())
  assert data["meta"]["waited"] is True and data["meta"]["command"].endswith(" ".join(argv))
  (row,) = data["rows"]
  labels = ("scan_u1", "parallel_u1")  # --unrolls=1: no unrolled scan variant.
  for label in labels:
    for mode in ("fwd", "fwd_bwd"):
      assert row[f"{label}_{mode}_s"] > 0 and row[f"{label}_{mode}_mem_bytes"] > 0
    assert row[f"{label}_vs_scan_fwd_bwd"] == pytest.approx(
        row["scan_u1_fwd_bwd_s"] / row[f"{label}_fwd_bwd_s"])
  assert not any(k.startswith("transformer") for k in row)  # cuDNN: bfloat16 on a GPU only.


def test_gpu_suite_script_parses_and_names_its_parts():
  """experiments/gpu_suite.sh (the GPU rows of the docs) is valid bash and refuses an
  unknown part with its usage."""
  import subprocess
  path = os.path.join(ROOT, "experiments", "gpu_suite.sh")
  subprocess.run(["bash", "-n", path], check=True)
  done = subprocess.run(["bash", path, "nope"], env={**os.environ, "OUT": "/tmp/unused"},
                        capture_output=True, text=True)
  assert done.returncode == 2 and "harness|recurrent|rest|cudnn" in done.stderr
  assert "|studies|collect" in done.stderr


def test_gpu_suite_collect_returns_cut_runs_not_finished_chains_phases(tmp_path):
  """gpu_suite.sh collect (the end of `studies`): a run with a checkpoint and no result.json
  comes back in unfinished.tgz, smallest first; a curriculum phase (<base>_short,
  <base>_medium) only while no run after it finished; finished runs' result.json and every
  log go to studies.tgz; an unfinished.tgz of an earlier call does not survive."""
  import subprocess
  import tarfile
  work, out = tmp_path / "work", tmp_path / "out"

  def run(name, finished=False, kib=1):
    (work / name / "checkpoints" / "1").mkdir(parents=True)
    (work / name / "checkpoints" / "1" / "w").write_bytes(b"x" * 1024 * kib)
    (work / name / "metrics.jsonl").write_text("{}\n")
    if finished:
      (work / name / "result.json").write_text("{}")

  run("msum/slstm_n400_s1", kib=40)  # Cut.
  run("msum/ran_n50_s0", finished=True)
  run("listops/reduced_ran_s0_cur8_short")  # Its chain finished: not returned.
  run("listops/reduced_ran_s0_cur8_mid2_medium")
  run("listops/reduced_ran_s0_cur8_mid2", finished=True)
  run("listops/reduced_star_s1_cur8_short", kib=8)  # Its chain was cut in a later phase.
  run("listops/reduced_star_s1_cur8_mid2_medium", kib=4)
  (work / "logs").mkdir()
  (work / "logs" / "q1.log").write_text("queue 1 exit 124")
  out.mkdir()
  (out / "unfinished.tgz").write_text("stale")
  script = os.path.join(ROOT, "experiments", "gpu_suite.sh")
  env = {**os.environ, "OUT": str(out), "WORKDIR": str(work)}
  subprocess.run(["bash", script, "collect"], env=env, check=True, capture_output=True)
  assert (work / "unfinished.txt").read_text().split() == [
      "listops/reduced_star_s1_cur8_mid2_medium", "listops/reduced_star_s1_cur8_short",
      "msum/slstm_n400_s1"]
  with tarfile.open(out / "unfinished.tgz") as tar:
    assert "msum/slstm_n400_s1/checkpoints/1/w" in tar.getnames()
  with tarfile.open(out / "studies.tgz") as tar:
    names = {n.removeprefix("./") for n in tar.getnames()}
  assert {"msum/ran_n50_s0/result.json", "listops/reduced_ran_s0_cur8_mid2/result.json",
          "logs/q1.log"} <= names
  # Nothing cut: no unfinished.tgz (not the stale one).
  for name in ("msum/slstm_n400_s1", "listops/reduced_star_s1_cur8_mid2_medium"):
    (work / name / "result.json").write_text("{}")
  subprocess.run(["bash", script, "collect"], env=env, check=True, capture_output=True)
  assert not (out / "unfinished.tgz").exists()


@pytest.mark.long
def test_gpu_suite_studies_stops_queues_cleanly_and_returns_unfinished_runs(tmp_path):
  """gpu_suite.sh studies at the tiny sizes on this CPU: a queue cut by its time limit is
  stopped by SIGTERM to the study alone (the trainer saves its step), its run comes back in
  unfinished.tgz with its checkpoint, and the timing script runs after the queues."""
  import subprocess
  import tarfile
  out, work = tmp_path / "out", tmp_path / "work"
  env = {**os.environ, "OUT": str(out), "WORKDIR": str(work), "TINY": "1", "QUEUES": "1",
         "T1": "25", "PYTHON": sys.executable}
  subprocess.run(["bash", os.path.join(ROOT, "experiments", "gpu_suite.sh"), "studies"],
                 env=env, check=True, cwd=ROOT, capture_output=True, timeout=900)
  log = (work / "logs" / "q1.log").read_text()
  assert "SIGTERM: " in log and "saved at step" in log and "queue 1 exit 124" in log
  with tarfile.open(out / "unfinished.tgz") as tar:
    names = tar.getnames()
  assert any(n.startswith("msum/slstm_n400_s1/checkpoints/") for n in names), names
  assert (out / "studies.tgz").exists()
  assert json.loads((out / "ran_gpu_fp32.json").read_text())["meta"]["waited"] is True


def test_slstm_pooled_speed_against_an_earlier_revision(tmp_path):
  """experiments/slstm_pooled_speed.py at a tiny size, against today's module loaded from
  its file (a checkout may have no git history; the documented run names a revision): both
  modules' pooled-only gradients agree, every function is timed and its compiled memory
  recorded; the JSON says what the baseline was."""
  out = tmp_path / "pooled.json"
  before = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "longtext_jax", "encoders", "slstm.py")
  argv = [f"--before={before}", "--cases=8x2x16", "--steps=2", "--repeats=1", f"--out={out}"]
  (row,) = _experiment("slstm_pooled_speed").main(argv)
  assert row["grad_max_abs_diff"] < 1e-5
  for key in ("now_pooled_fwd", "now_pooled_fwd_bwd", "before_pooled_fwd",
              "before_pooled_fwd_bwd", "now_both_fwd_bwd"):
    assert row[f"{key}_wall_s"] > 0 and row[f"{key}_mem_bytes"] > 0
  assert row["speedup_fwd_bwd_wall"] == pytest.approx(
      row["before_pooled_fwd_bwd_wall_s"] / row["now_pooled_fwd_bwd_wall_s"])
  data = json.loads(out.read_text())
  assert data["meta"]["before"] == before and data["meta"]["command"].endswith(" ".join(argv))
  with pytest.raises(SystemExit, match="no-such-revision"):
    _experiment("slstm_pooled_speed").main(["--before=no-such-revision"])


def test_results_files_are_written_whole_or_not_at_all(tmp_path):
  """harness.write_results: the file every experiments/ script writes; a write that fails
  half way (here a value whose text raises) leaves the previous results intact and no
  temporary file; run_meta records the command as typed."""
  path = tmp_path / "sub" / "results.json"
  meta = harness.run_meta("experiments/x.py", ["--a=1", "--out=r.json"], extra=3)
  assert meta["command"] == "python experiments/x.py --a=1 --out=r.json"
  assert meta["extra"] == 3 and meta["jax"] == jax.__version__ and meta["host"]
  harness.write_results(str(path), meta, [{"v": 1}], table=[2])
  before = path.read_text()
  assert json.loads(before) == {"meta": json.loads(json.dumps(meta)), "rows": [{"v": 1}],
                                "table": [2]}

  class Unwritable:
    def __str__(self):
      raise RuntimeError("killed while writing")

  with pytest.raises(RuntimeError, match="killed"):
    harness.write_results(str(path), meta, [{"v": 1}] * 5000 + [{"v": Unwritable()}])
  assert path.read_text() == before and os.listdir(path.parent) == ["results.json"]
