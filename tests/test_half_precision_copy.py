"""experiments/half_precision_copy.py: a HF BERT folder with 16-bit weights loads as the
original rounded to 16 bits, with every other file unchanged."""
import json

import ml_dtypes
import numpy as np
import pytest

import hf_folders
from conftest import load_script
from longtext_jax.encoders import bert_checkpoint


copy_lib = load_script("experiments/half_precision_copy.py")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_copy_loads_as_the_rounded_original(tmp_path, dtype):
  src = tmp_path / "src"
  hf_folders.write_folder(src, vocab=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"])
  (src / "tokenizer_config.json").write_text('{"do_lower_case": true}')
  out = tmp_path / "out"
  marker = copy_lib.half_precision_copy(str(src), str(out), dtype)
  assert marker["dtype"] == dtype and marker["copy_bytes"] < 0.6 * marker["source_bytes"]
  assert copy_lib.read_marker(str(out)) == marker and copy_lib.read_marker(str(src)) is None
  for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
    assert (out / name).read_bytes() == (src / name).read_bytes(), name
  _, original = bert_checkpoint.from_pretrained(str(src))
  module, copied = bert_checkpoint.from_pretrained(str(out))
  assert module.hidden_size == 16
  half = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
  flat_o = dict(_flatten(original))
  flat_c = dict(_flatten(copied))
  assert flat_o.keys() == flat_c.keys()
  changed = 0
  for key, value in flat_o.items():
    assert flat_c[key].dtype == np.float32, key  # Loaded in the model's dtype.
    np.testing.assert_array_equal(flat_c[key], value.astype(half).astype(np.float32), key)
    changed += int(np.any(flat_c[key] != value))
  assert changed > 0  # The copy is rounded: a table must say so (own_corpus_table).


def _flatten(tree, prefix=()):
  for key, value in tree.items():
    if isinstance(value, dict):
      yield from _flatten(value, prefix + (key,))
    else:
      yield prefix + (key,), np.asarray(value)


def test_copy_refuses_overflow_its_own_folder_and_missing_weights(tmp_path):
  src = tmp_path / "src"
  _, state = hf_folders.write_folder(src)
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  name = next(iter(state))
  state[name] = state[name] * 1e6  # Beyond float16's 65504.
  save_file(state, str(src / "model.safetensors"))
  with pytest.raises(ValueError, match="exceed float16's range; use --dtype bfloat16"):
    copy_lib.half_precision_copy(str(src), str(tmp_path / "out"))
  copy_lib.half_precision_copy(str(src), str(tmp_path / "out"), "bfloat16")  # In range.
  with pytest.raises(ValueError, match="--out must differ from --src"):
    copy_lib.half_precision_copy(str(src), str(src))
  with pytest.raises(FileNotFoundError, match="no model.safetensors in"):
    copy_lib.half_precision_copy(str(tmp_path / "out" / "nothing"), str(tmp_path / "o2"))
  with pytest.raises(ValueError, match="--dtype must be one of"):
    copy_lib.half_precision_copy(str(src), str(tmp_path / "o3"), "int8")
  assert json.loads((tmp_path / "out" / "HALF_PRECISION.json").read_text())["dtype"] == (
      "bfloat16")


def test_a_copy_cut_midway_never_leaves_rounded_weights_unmarked(tmp_path, monkeypatch):
  """The marker is written first and each file whole: over an original folder, a copy that
  dies while writing the weights leaves the original weights (not half a file) under a
  marker that says rounded (the table then under-claims, never over-claims)."""
  src, out = tmp_path / "src", tmp_path / "out"
  hf_folders.write_folder(src)
  hf_folders.write_folder(out)  # An original (float32) folder in the way.
  before = (out / "model.safetensors").read_bytes()
  real = copy_lib.fileio.write_bytes_atomic

  def dies_before_weights(path, data):
    if path.endswith("model.safetensors"):
      raise KeyboardInterrupt
    real(path, data)

  monkeypatch.setattr(copy_lib.fileio, "write_bytes_atomic", dies_before_weights)
  with pytest.raises(KeyboardInterrupt):
    copy_lib.half_precision_copy(str(src), str(out))
  assert copy_lib.read_marker(str(out))["dtype"] == "float16"
  assert (out / "model.safetensors").read_bytes() == before
  assert not [p.name for p in out.iterdir() if ".tmp" in p.name]  # No temporary file.
  monkeypatch.setattr(copy_lib.fileio, "write_bytes_atomic", real)
  marker = copy_lib.half_precision_copy(str(src), str(out))  # A rerun completes it.
  assert (out / "model.safetensors").stat().st_size == marker["copy_bytes"]
