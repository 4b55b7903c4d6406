"""Every parameter of every encoder (and of the inputs and heads) carries logical axis names
that config.mesh.rules knows; naming changes no value; the trainer's shardings use them."""
import dataclasses

import flax.linen as nn
import jax
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from conftest import load_config
from longtext_jax import encoders
from longtext_jax import data as data_lib
from longtext_jax import model as model_lib
from longtext_jax import tasks as tasks_lib
from longtext_jax.config import encoder_config
from longtext_jax.layers import partitioning
from longtext_jax.train import sharding
from longtext_jax.train.loop import _first_batch_shapes, _strip_host_keys


def config_for(name):
  if encoders.input_kind(encoders.ENCODERS[name]) == "ids":  # BERT family embeds ids itself.
    config = load_config("needle.py", "transformer,tiny")
    config.data.bucket_batches = 0
    config.model.input = "ids"
    fields = {f.name for f in dataclasses.fields(encoders.ENCODERS[name])}
    extra = {k: v for k, v in dict(chunk_size=32, num_last_layers=1, num_filters=8,
                                   chunk_layers=1, chunk_heads=4).items() if k in fields}
    config.model.encoder = encoder_config(
        name, vocab_size=config.model.vocab_size, hidden_size=32, num_layers=1, num_heads=4,
        intermediate_size=64, cls_id=2, sep_id=3, **extra)
    return config
  config = load_config("masked_summation.py", "transformer,tiny")
  config.model.encoder = encoder_config(name, **({"position": "learned"}
                                                 if name in ("transformer", "slstm",
                                                             "star_transformer") else {}))
  return config


def _model_and_batch(name):
  config = config_for(name)
  task = tasks_lib.get_task(config.task)
  splits = data_lib.build_splits(config, task)
  batch = _strip_host_keys(_first_batch_shapes(splits["train"], 2, 1))
  return config, model_lib.build_model(config), batch


def _boxed_leaves(tree):
  return jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, nn.Partitioned))


@pytest.mark.parametrize("name", sorted(encoders.ENCODERS))
def test_every_parameter_is_named_with_known_names(name):
  config, model, batch = _model_and_batch(name)
  rule_names = {n for n, _ in config.mesh.rules}
  with partitioning.logical_axis_names():
    abstract = jax.eval_shape(lambda: model.init(jax.random.key(0), batch))["params"]
  leaves = _boxed_leaves(abstract)
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(
      abstract, is_leaf=lambda x: isinstance(x, nn.Partitioned))[0]]
  unnamed = [p for p, leaf in zip(paths, leaves) if not isinstance(leaf, nn.Partitioned)]
  assert not unnamed, unnamed
  for path, leaf in zip(paths, leaves):
    assert len(leaf.names) == leaf.value.ndim, (path, leaf.names, leaf.value.shape)
    assert set(leaf.names) <= rule_names, (path, leaf.names)
  # Outside the context, init gives plain arrays (library users index them directly).
  plain = jax.eval_shape(lambda: model.init(jax.random.key(0), batch))["params"]
  assert not any(isinstance(x, nn.Partitioned) for x in _boxed_leaves(plain))
  assert jax.tree.structure(plain) == jax.tree.structure(nn.meta.unbox(abstract))


@pytest.mark.parametrize("name", ["ran", "bilstm"])
def test_naming_changes_no_value(name):
  _, model, batch = _model_and_batch(name)
  init = jax.jit(lambda: model.init(jax.random.key(0), batch))
  plain = init()
  with partitioning.logical_axis_names():
    named = nn.meta.unbox(jax.jit(lambda: model.init(jax.random.key(0), batch))())
  jax.tree.map(np.testing.assert_array_equal, plain, named)


def test_state_shardings_follow_the_rules():
  config, model, batch = _model_and_batch("ran")
  with partitioning.logical_axis_names():
    abstract = jax.eval_shape(lambda: model.init(jax.random.key(0), batch))["params"]
  mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1, 1), sharding.AXES)
  shardings = sharding.state_shardings(abstract, mesh, config.mesh.rules, 2**30)
  layer = shardings["encoder"]["layers_0"]
  assert layer["query"]["dense"]["kernel"].spec == P("fsdp", "tensor", None)
  assert layer["out"]["dense"]["kernel"].spec == P("tensor", None, "fsdp")
  assert layer["ln_in"]["scale"].spec == P("fsdp")
  assert shardings["encoder"]["gpc_out"]["dense"]["kernel"].spec == P("fsdp", "tensor")
  assert shardings["head"]["out"]["kernel"].spec == P("fsdp", None)


def test_activation_constraint_is_a_no_op_outside_the_trainer_context():
  x = np.ones((4, 3, 8), np.float32)
  assert partitioning.constrain(x) is x
  mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1, 1), sharding.AXES)
  config = load_config("masked_summation.py", "transformer,tiny")
  with partitioning.activation_sharding(mesh, config.mesh.rules):
    text = jax.jit(lambda a: partitioning.constrain(a) * 2).lower(x).as_text()
  assert "sharding" in text
