"""The config schema, its validation, the shared config-arg parser, and every config's
documented launch command (built through the CLI's file loader, validated, and run for a
few steps with ``tiny`` where its data is available offline)."""
import glob
import json
import os
import re
import types

from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np
import pytest

from conftest import ROOT, load_config
from configs import common
from longtext_jax import config as config_lib
from longtext_jax.data import pipeline
from longtext_jax import encoders
from longtext_jax import tasks
from longtext_jax.model import build_model

CONFIG_FILES = sorted(os.path.relpath(p, os.path.join(ROOT, "configs")) for p in glob.glob(
    os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)
                      if not os.path.basename(p).startswith("__") and
                      os.path.basename(p) != "common.py")
# Sources whose data is generated or ships with Python: their launch commands run here.
OFFLINE_SOURCES = ("masked_summation", "listops", "listops_mlm", "needle", "recall",
                   "long_tasks", "pydoc_mlm", "pydoc_pairs")


def _launch_commands(path):
  """The ``python -m longtext_jax.main`` commands of a config file's docstring, each as
  (config arg or None, ['--config.x=y', ...])."""
  with open(os.path.join(ROOT, "configs", path), encoding="utf-8") as f:
    doc = f.read().split('"""')[1]
  text = re.sub(r"\\\n\s*", " ", doc)  # Join continuation lines.
  out = []
  for line in text.splitlines():
    if "python -m longtext_jax.main" not in line:
      continue
    words = line.split()
    config = [w for w in words if w.startswith("--config=")]
    assert len(config) == 1, line
    file, _, arg = config[0][len("--config="):].partition(":")
    assert file == f"configs/{path}", f"{path}'s docstring launches {file}"
    overrides = [w for w in words if w.startswith("--config.")]
    out.append((arg or None, overrides))
  return out


def _cli_config(path, arg, overrides):
  """The config as ``python -m longtext_jax.main --config=configs/<path>:<arg> ...`` builds
  it: ml_collections' file loader (no package import), locked, with the overrides."""
  spec = f"{os.path.join(ROOT, 'configs', path)}" + (f":{arg}" if arg else "")
  argv = ["prog", f"--config={spec}", *overrides]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True,
                                  sys_argv=argv)
  values(argv)
  return values.config


def _with_tiny(arg):
  return "tiny" if not arg else arg if "tiny" in arg.split(",") else arg + ",tiny"


# ---------------------------------------------------------------------------------------
# The launch commands.

@pytest.mark.parametrize("path", CONFIG_FILES)
def test_docstring_launch_commands_build_and_validate(path):
  """Each config's docstring holds its launch commands; each builds through the CLI's
  file loader (overrides included) and validates, as does its tiny variant."""
  commands = _launch_commands(path)
  assert commands, f"configs/{path}: the docstring has no launch command"
  for arg, overrides in commands:
    # A checkpoint named by 'pretrained=' (not on this machine) is read unless tiny.
    missing = [p for p in re.findall(r"pretrained=([^,]+)", arg or "") if not os.path.exists(p)]
    for a in ([] if missing else [arg]) + [_with_tiny(arg)]:
      config = _cli_config(path, a, overrides)
      config_lib.validate(config)
      build_model(config)


# The official configs are trained by no other test; the long case runs every offline config.
OFFICIAL = ("ran/official.py", "slstm/official.py")


@pytest.mark.slow
@pytest.mark.parametrize("only", [OFFICIAL, pytest.param(None, marks=pytest.mark.long)])
def test_first_launch_command_of_each_offline_config_trains_two_steps(tmp_path, monkeypatch,
                                                                      only):
  """The first launch command of every config whose data is offline (``only`` those when
  given) runs (tiny, 2 steps) and writes its metrics. The others (TFDS datasets, corpora and benchmark files that are
  not on this machine: text_classification, ran/paper, chunkbert, star/star_transformer)
  are built and validated only, above."""
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("LONGTEXT_JAX_CACHE", str(tmp_path / "cache"))
  seen, ran = set(), []
  for path in CONFIG_FILES:
    if only and path not in only:
      continue
    arg, overrides = _launch_commands(path)[0]
    config = _cli_config(path, _with_tiny(arg), overrides)
    if config.data.name not in OFFLINE_SOURCES:
      continue
    # A fine-tuning command names its pretraining run and tokenizer: start fresh here.
    config.init_from.path = config.data.tokenizer.path = ""
    key = json.dumps(config.to_dict(), sort_keys=True, default=str)
    if key in seen:  # configs/default.py is configs/ran/demo.py.
      continue
    seen.add(key)
    tcfg = config.train
    tcfg.num_steps, tcfg.eval_every, tcfg.checkpoint_every, tcfg.log_every = 2, 2, 2, 1
    tcfg.progress_bar = tcfg.async_checkpoint = False
    config.data.num_eval = min(config.data.num_eval, 32) or 0
    workdir = tmp_path / path.replace("/", "_")
    train.train_and_evaluate(config, str(workdir))
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
    assert {(r["step"], r["split"]) for r in records} >= {(1, "train"), (2, "eval")}, path
    assert all(v == v for r in records for v in r.values()), path  # No NaN.
    ran.append(path)
    jax.clear_caches()
  # default.py and ran/demo.py tiny are ran/long_tasks.py's tiny last_window; slstm/finetune's
  # first command reads GLUE files.
  assert len(ran) >= (len(only) if only else 9), ran  # The offline configs (official included).


# ---------------------------------------------------------------------------------------
# The arg parser, tiny and encoder=.

def test_parse_arg_positionals_flags_and_options():
  pos = [common.Positional("dataset", ("a", "b")), common.Positional("size", ("s", "l"), "s")]
  got = common.parse_arg("b,tiny,encoder=ran", pos)
  assert got == {"dataset": "b", "size": "s", "tiny": True, "encoder": "ran"}
  assert common.parse_arg("size=l,dataset=a", pos)["size"] == "l"
  with pytest.raises(ValueError, match=r"dataset 'c' is not one of \['a', 'b'\]"):
    common.parse_arg("c", pos)
  with pytest.raises(ValueError, match="missing dataset"):
    common.parse_arg("tiny", pos)
  with pytest.raises(ValueError, match="unknown option 'big'"):
    common.parse_arg("a,l,big", pos)
  with pytest.raises(ValueError, match=r"encoder='nope': choose one of \['bert_first'"):
    common.parse_arg("a,encoder=nope", pos)
  with pytest.raises(ValueError, match="unknown option 'depth'"):
    common.parse_arg("a,depth=3", pos)


def test_local_pretrained_folder_is_refused_for_a_from_scratch_encoder():
  """pretrained= with an encoder that would ignore it is an error, not a silent no-op."""
  with pytest.raises(ValueError, match=r"pretrained=/m is for the BERT encoders.*"
                                       r"encoder=ran trains from scratch"):
    load_config("text_classification.py", "local,encoder=ran,pretrained=/m")


@pytest.mark.parametrize("path,arg", [("masked_summation.py", "encoder=lstm"),
                                      ("listops.py", "encoder=bilstm"),
                                      ("needle.py", "encoder=bilstm"),
                                      ("recall.py", "copy"), ("mlm.py", "encoder=slstm"),
                                      ("text_classification.py", "local"),
                                      ("ran/long_tasks.py", "tagging"),
                                      ("ran/paper.py", "agnews"), ("ran/demo.py", ""),
                                      ("ran/masked_sum.py", ""), ("default.py", ""),
                                      ("slstm/pretrain.py", "paper"),
                                      ("slstm/finetune.py", "rte"),
                                      ("star/masked_summation.py", "star_no_ring"),
                                      ("star/star_transformer.py", "conll03,crf"),
                                      ("chunkbert/long_benchmark.py", "eurlex,encoder=tobert")])
def test_tiny_shrinks_and_encoder_option_swaps_the_encoder(path, arg):
  """Every config takes ``tiny`` (fewer steps) and ``encoder=<name>`` (that encoder, a
  config that validates and builds)."""
  full = load_config(path, arg)
  small = load_config(path, _with_tiny(arg))
  assert small.train.num_steps < full.train.num_steps
  assert small.model.d_model <= full.model.d_model
  name = "ran" if full.model.encoder.name != "ran" else "transformer"
  if full.model.input == "features":
    name = "bilstm" if full.model.encoder.name != "bilstm" else "lstm"
  swapped_arg = _with_tiny(re.sub(r"encoder=\w+", f"encoder={name}", arg))
  if f"encoder={name}" not in swapped_arg:
    swapped_arg += f",encoder={name}"
  swapped = load_config(path, swapped_arg)
  assert swapped.model.encoder.name == name
  config_lib.validate(swapped)
  build_model(swapped)
  assert swapped.train.num_steps == small.train.num_steps


@pytest.mark.parametrize("name", sorted(encoders.ENCODERS))
def test_every_registered_encoder_fits_a_token_task(name):
  """``encoder=<any registered name>`` gives a model that initialises on the task's batch."""
  c = load_config("needle.py", f"{name},tiny")
  config_lib.validate(c)
  model = build_model(c)
  batch = {"input_ids": jax.numpy.full((2, 32), 7, "int32"),
           "mask": jax.numpy.ones((2, 32), bool)}
  out = jax.eval_shape(lambda: model.init_with_output(jax.random.key(0), batch))[0]
  assert out["logits"].shape == (2, 4)


def test_encoder_option_gives_a_causal_encoder_for_lm():
  for name, field in (("transformer", "causal"), ("ran", "mask_type")):
    c = load_config("recall.py", f"copy,tiny,encoder={name}")
    assert c.model.encoder[field] in (True, "causal")
    config_lib.validate(c)


def test_configs_import_as_a_package():
  import configs.ran.demo  # pylint: disable=import-outside-toplevel
  assert configs.ran.demo.get_config().to_dict() == load_config("default.py").to_dict()


# ---------------------------------------------------------------------------------------
# The schema and validate().

def test_every_schema_field_has_a_one_line_meaning():
  """In base_config each field is set once, with a comment on its line or the line above."""
  with open(os.path.join(ROOT, "longtext_jax", "config.py"), encoding="utf-8") as f:
    lines = f.read().split("def base_config")[1].split("\ndef ")[0].splitlines()
  fields = []
  for i, line in enumerate(lines):
    m = re.match(r"\s+(c\.[\w.]+) = (?!ml_collections\.ConfigDict)", line)
    if m:
      fields.append(m.group(1))
      assert "#" in line or lines[i - 1].strip().startswith("#"), line
  assert len(fields) == len(set(fields)), "a field is set twice"
  assert len(fields) > 100


def test_library_reads_no_config_field_with_a_default_of_its_own():
  """Config reads are attribute reads (the schema has every field); `.get(field, default)`
  would hide a field missing from the schema. Encoder configs differ per encoder."""
  pattern = re.compile(r"\b(config|cfg|d|mcfg|tcfg|data_config|task_config|optim_config|"
                       r"mesh_config|tokenizer_config|tok|self\.config)(\.\w+)*\.get\(")
  bad = []
  for path in glob.glob(os.path.join(ROOT, "longtext_jax", "**", "*.py"), recursive=True):
    with open(path, encoding="utf-8") as f:
      for n, line in enumerate(f, 1):
        if pattern.search(line) and ".encoder.get(" not in line:
          bad.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
  assert not bad, "\n".join(bad)


def test_every_config_sets_only_schema_fields():
  """Configs change values, they add no fields (except encoder fields)."""
  def keys(d, prefix=""):
    for k, v in d.items():
      if isinstance(v, dict) and k != "encoder":
        yield from keys(v, f"{prefix}{k}.")
      else:
        yield prefix + k
  schema = set(keys(config_lib.base_config().to_dict()))
  for path in CONFIG_FILES:
    arg, overrides = _launch_commands(path)[0]
    extra = set(keys(_cli_config(path, arg, overrides).to_dict())) - schema
    assert not extra, (path, extra)


def test_validate_names_the_field_and_the_choices():
  c = load_config("masked_summation.py", "transformer,tiny")
  config_lib.validate(c)
  cases = [
      ("model.encoder.param_dtype", "bfloat16", r"param_dtype='bfloat16': training keeps no "
                                                r"float32 master copy"),
      ("optim.schedule", "cosin", r"config.optim.schedule='cosin': choose one of "
                                  r"\['constant', 'cosine', 'linear'\]"),
      ("task.name", "clasification", r"config.task.name='clasification': choose one of "
                                     r"\['binary', 'classification'"),
      ("data.name", "nope", r"config.data.name='nope': choose one of \["),
      ("model.encoder.name", "rann", r"config.model.encoder.name='rann'"),
      ("train.best_mode", "maximum", r"\['max', 'min'\]"),
      ("data.tokenizer.kind", "bpe", r"\['byte', 'sentencepiece', 'word', 'wordpiece'\]"),
      ("model.input", "embeddings", r"\['features', 'ids', 'tokens'\]"),
  ]
  for field, value, message in cases:
    bad = load_config("masked_summation.py", "transformer,tiny")
    bad.unlock()
    common.set_fields(bad, {field: value})
    with pytest.raises(ValueError, match=message):
      config_lib.validate(bad)


def test_validate_checks_best_metric_against_the_task():
  c = load_config("needle.py", "transformer,tiny")
  task = tasks.get_task(c.task)
  config_lib.validate(c, task)
  c.train.best_metric = "acuracy"
  reported = re.escape(str(sorted(task.metric_names)))
  with pytest.raises(ValueError, match=r"best_metric='acuracy': task 'classification' "
                                       r"reports " + reported):
    config_lib.validate(c, task)
  with pytest.raises(ValueError, match="best_metric='acuracy'"):
    config_lib.validate(c)  # The task is built from config.task.


@pytest.mark.parametrize("metric,mode", [("loss", "max"), ("accuracy", "min")])
def test_validate_ties_best_mode_to_the_metrics_direction_and_intervals_to_one_or_more(
    metric, mode):
  """best_metric='loss' with the config's best_mode='max' would keep the worst checkpoint
  and stop a run while its loss still falls; an interval of 0 would divide by zero after
  the data were loaded and the steps compiled."""
  c = load_config("needle.py", "transformer,tiny")
  c.train.best_metric, c.train.best_mode = metric, mode
  want = "min" if mode == "max" else "max"
  with pytest.raises(ValueError, match=rf"best_mode='{mode}': best_metric='{metric}' is "
                                       rf"better .*set config.train.best_mode='{want}'"):
    config_lib.validate(c)
  c.train.best_mode = want
  config_lib.validate(c)
  c.train.eval_every = c.train.checkpoint_every = 0
  with pytest.raises(ValueError, match=r"eval_every=0 must be >= 1\n  config.train."
                                       r"checkpoint_every=0 must be >= 1"):
    config_lib.validate(c)
  c.train.eval_every = c.train.checkpoint_every = 1
  c.optim.grad_accum_steps = 0
  with pytest.raises(ValueError, match=r"optim.grad_accum_steps=0 must be >= 1"):
    config_lib.validate(c)
  c.optim.grad_accum_steps = 1
  # Sizes of 0 crashed later with a bare ZeroDivisionError; a negative rate trained uphill.
  c.data.batch_size, c.model.d_model, c.optim.learning_rate = 0, 0, -1.0
  with pytest.raises(ValueError, match=r"data.batch_size=0 must be >= 1\n.*model.d_model=0 "
                                       r"must be >= 1\n.*learning_rate=-1.0 must be >= 0"):
    config_lib.validate(c)


def test_validate_names_a_comma_list_given_where_a_tuple_of_names_is_meant():
  """--config.data.label_names=neg,pos is one name 'neg,pos' to ml_collections."""
  c = load_config("needle.py", "transformer,tiny")
  c.data.label_names = ("neg,pos",)
  with pytest.raises(ValueError, match=r"label_names=\('neg,pos',\) is one name holding "
                                       r"commas; for 2 names write --config.data.label_names="
                                       r"\"\('neg', 'pos'\)\""):
    config_lib.validate(c)
  c.data.label_names = ("neg", "pos")
  config_lib.validate(c)


def test_validate_ties_a_tagging_tasks_label_names_to_its_tag_names():
  """data.label_names orders the data's tag ids, task.tag_names the ids span F1 reads: set
  both, they must be one order (configs/star's conll03 sets one from the other)."""
  c = load_config("star/star_transformer.py", "conll03,tiny")
  config_lib.validate(c)
  names = c.task.tag_names
  c.data.label_names = tuple(sorted(names))
  with pytest.raises(ValueError, match=r"config.data.label_names=\('B-LOC', .*differs from "
                                       r"config.task.tag_names=\('O', 'B-PER', .*set "
                                       r"config.data.label_names = config.task.tag_names"):
    config_lib.validate(c)
  c.data.label_names = ()  # Unknown until the data are read: checked by build_splits.
  config_lib.validate(c)


def test_the_left_to_right_lstm_is_causal_and_others_are_told_what_to_set():
  """encoder=lstm (bidirectional=False) passes the lm task's causality check, and is
  causal: the logits at t do not move when the tokens after t change. An encoder that
  cannot be causal is named with the ones that can (it was told to set a `causal` field
  it does not have)."""
  c = load_config("recall.py", "copy,tiny,encoder=lstm")
  config_lib.validate(c)
  model = build_model(c)
  ids = np.random.default_rng(0).integers(1, c.model.vocab_size, (2, 12))
  batch = {"input_ids": jnp.asarray(ids), "mask": jnp.ones((2, 12), bool)}
  params = model.init(jax.random.key(0), batch)["params"]
  changed = dict(batch, input_ids=batch["input_ids"].at[:, 7:].set(1))
  a, b = (model.apply({"params": params}, x)["logits"] for x in (batch, changed))
  np.testing.assert_array_equal(a[:, :7], b[:, :7])
  assert not np.allclose(a[:, 7:], b[:, 7:])
  star = load_config("recall.py", "copy,tiny,encoder=star_transformer")
  with pytest.raises(ValueError, match=r"encoder 'star_transformer' cannot be causal; "
                                       r"encoders that can: \['bilstm', 'lstm', 'ran', "
                                       r"'transformer'\]"):
    config_lib.validate(star)


def test_validate_rejects_encoder_task_combinations_that_cannot_work():
  lm = load_config("recall.py", "copy,tiny")
  lm.model.encoder.causal = False
  with pytest.raises(ValueError, match="task 'lm' needs a causal encoder"):
    config_lib.validate(lm)
  causal_task = types.SimpleNamespace(metric_names=("loss",), needs_causal_encoder=True,
                                      predicts_tokens=False)
  cls = load_config("needle.py", "transformer,tiny")
  with pytest.raises(ValueError, match="needs a causal encoder"):
    config_lib.validate(cls, causal_task)
  ids = load_config("chunkbert/long_benchmark.py", "hyperpartisan,chunk_bert,tiny")
  ids.model.input = "tokens"
  with pytest.raises(ValueError, match="embeds ids itself: set config.model.input='ids'"):
    config_lib.validate(ids)
  tok = load_config("needle.py", "transformer,tiny")
  tok.model.input = "ids"
  with pytest.raises(ValueError, match="'ids' is only for encoders that embed ids"):
    config_lib.validate(tok)


def test_validate_rejects_a_long_threshold_no_example_can_exceed():
  c = load_config("needle.py", "transformer,tiny")
  c.data.long_threshold = c.data.seq_len
  with pytest.raises(ValueError, match="long_threshold=96: no eval example can be longer"):
    config_lib.validate(c)
  c.data.long_threshold = c.data.seq_len - 1
  config_lib.validate(c)


def test_validate_lists_every_problem_at_once():
  c = load_config("masked_summation.py", "transformer,tiny")
  c.optim.schedule, c.train.best_mode = "x", "y"
  with pytest.raises(ValueError) as err:
    config_lib.validate(c)
  assert "optim.schedule" in str(err.value) and "train.best_mode" in str(err.value)


def test_every_config_validates_with_its_real_task():
  """Every config's launch command gives a config whose best metric is one its task reports."""
  for path in CONFIG_FILES:
    arg, overrides = _launch_commands(path)[0]
    config = _cli_config(path, arg, overrides)
    config_lib.validate(config, tasks.get_task(config.task))


# Sources whose examples differ in length: each batch is padded to its longest example,
# rounded up to data.pad_multiple, and every padded length compiles the steps anew.
VARIABLE_LENGTH_SOURCES = ("local", "local_text", "tfds", "listops", "needle")


@pytest.mark.parametrize("path", CONFIG_FILES)
def test_variable_length_configs_compile_for_few_batch_lengths(path):
  """A config reading examples of varied length pads batches to at most 64 lengths (up to
  its cut; whole documents up to 4,096 tokens): with ``data.pad_multiple=1`` (the schema
  default) every length up to the cut is a batch shape of its own, and the train and eval
  steps compile again for each new one (the Star configs had up to 256 programs, RAN's
  paper config up to 4,096: a tiny CoNLL run of the Star config took 21 s a step on a
  CPU, nearly all of it compiling)."""
  for arg, overrides in _launch_commands(path):
    missing = [p for p in re.findall(r"pretrained=([^,]+)", arg or "") if not os.path.exists(p)]
    for a in ([] if missing else [arg]) + [_with_tiny(arg)]:
      d = _cli_config(path, a, overrides).data
      if d.name not in VARIABLE_LENGTH_SOURCES:
        continue
      # Text sources cut at data.max_tokens (0: documents whole, counted here up to 4,096
      # tokens); generated ones at data.seq_len.
      cut = (d.max_tokens or 4096) if d.name in ("local", "tfds") else d.seq_len
      lengths = {pipeline.padded_length(n, d.pad_multiple, d.pad_offset)
                 for n in range(1, cut + 1)}
      assert len(lengths) <= 64, (
          f"configs/{path}:{a}: data.pad_multiple={d.pad_multiple} gives {len(lengths)} batch "
          f"lengths up to {cut} tokens")


def test_apply_overrides_types_each_value_as_its_field_and_names_bad_items():
  """config.apply_overrides (the studies' --override): each value takes its field's type
  (booleans from true/false or 1/0, never bool('False') == True; sequences from a literal,
  never tuple('ab') == ('a', 'b')); a missing field, a group, a refused field or a value
  of the wrong type raises an error naming the item, and the config is left as it was up
  to that item."""
  c = load_config("listops", "star,tiny")
  config_lib.apply_overrides(c, ["model.encoder.ring=False", "model.encoder.num_cycles=3",
                                 "optim.learning_rate=2e-3", "model.encoder.pooling=mean"])
  assert c.model.encoder.ring is False and c.model.encoder.num_cycles == 3
  assert c.optim.learning_rate == 2e-3 and c.model.encoder.pooling == "mean"
  c.data.label_names = ("a", "b")
  config_lib.apply_overrides(c, ["data.label_names=('x', 'y', 'z')"])
  assert c.data.label_names == ("x", "y", "z")
  config_lib.apply_overrides(c, ["data.label_names='q'"])
  assert c.data.label_names == ("q",)
  for item, says in [("model.encoder.ringg=1", "no field"), ("model=1", "group of fields"),
                     ("model.encoder.ring=off", "boolean"), ("model.encoder.num_cycles=2.5",
                                                             "is a int"),
                     ("data.label_names=(1,", "Python literal"),
                     ("data.label_names=q", "Python literal"), ("x", "field=value"),
                     ("seed=1", "set by --seeds")]:
    with pytest.raises(ValueError, match=re.escape(item)) as err:
      config_lib.apply_overrides(c, [item], refused={"seed": "--seeds"})
    assert says in str(err.value), item
  assert c.model.encoder.num_cycles == 3
