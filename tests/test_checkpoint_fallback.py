"""Restore past a damaged checkpoint: each kind of damage to the newest step is detected,
named, moved aside (never deleted), and the previous step is restored exactly."""
import glob
import json
import os
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longtext_jax.train import checkpointing
from longtext_jax.train.loop import TrainState


def _state(i: int) -> TrainState:
  """A tiny TrainState whose every value depends on ``i`` (the step)."""
  return TrainState(step=jnp.asarray(i, jnp.int32),
                    # 8 KB: large enough not to be inlined in OCDBT's b-tree nodes.
                    params={"dense": {"kernel": jnp.arange(2048.0).reshape(32, 64) * i,
                                      "bias": jnp.full((64,), 0.5 * i)}},
                    opt_state=({"mu": jnp.arange(4.0) - i}, jnp.asarray(i, jnp.int32)))


def _abstract(state):
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                      state)


def _assert_state_equal(got, want):
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               got, want)


def _save_steps(workdir, steps=(1, 2, 3), async_save=True):
  ckpt = checkpointing.Checkpointer(str(workdir), keep=10, async_save=async_save)
  for i in steps:
    ckpt.save(i, _state(i), {"position": i})
  ckpt.close()


def _damage(step_dir: str, kind: str) -> None:
  state_dir = os.path.join(step_dir, "state")
  # Array data and b-tree nodes: the files in the d/ folders of the OCDBT store.
  array_files = sorted(glob.glob(os.path.join(state_dir, "**", "d", "*"), recursive=True))
  assert array_files, os.listdir(state_dir)
  if kind == "truncated":
    for path in array_files:
      with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
  elif kind == "garbled":  # One flipped byte per file: Orbax itself restores this silently.
    for path in array_files:
      data = bytearray(open(path, "rb").read())
      data[len(data) // 2] ^= 0xFF
      open(path, "wb").write(bytes(data))
  elif kind == "emptied_manifest":
    open(os.path.join(state_dir, "manifest.ocdbt"), "wb").close()
  elif kind == "missing_state_metadata":
    os.remove(os.path.join(state_dir, "_METADATA"))
  elif kind == "missing_data_metadata":
    os.remove(os.path.join(step_dir, "data", "metadata"))
  elif kind == "empty_step_folder":
    shutil.rmtree(step_dir)
    os.makedirs(step_dir)
  else:
    raise ValueError(kind)


# (damage, recorded: the step has its good.json, expected tag). Without a record (checkpoints
# from before records existed) damage is found by the structure checks or by Orbax failing to
# read; a flipped byte in array data is then invisible, so 'garbled' needs the record.
CASES = [
    ("truncated", True, "truncated"),
    ("truncated", False, "unreadable"),
    ("garbled", True, "garbled"),
    ("emptied_manifest", True, "empty-manifest"),
    ("emptied_manifest", False, "empty-manifest"),
    ("missing_state_metadata", True, "missing-state-metadata"),
    ("missing_state_metadata", False, "missing-state-metadata"),
    ("missing_data_metadata", True, "missing-data-metadata"),
    ("missing_data_metadata", False, "missing-data-metadata"),
    ("empty_step_folder", True, "empty"),
]


@pytest.mark.parametrize("kind,recorded,tag", CASES)
def test_damaged_latest_falls_back_to_previous_step_exactly(tmp_path, caplog, kind, recorded,
                                                            tag):
  _save_steps(tmp_path)
  step3 = tmp_path / "checkpoints" / "3"
  if not recorded:
    for good in glob.glob(str(tmp_path / "checkpoints" / "*" / checkpointing.GOOD_FILE)):
      os.remove(good)
  _damage(str(step3), kind)

  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
  with caplog.at_level("WARNING"):
    restored = ckpt.restore_latest(_abstract(_state(0)))
  assert restored.step == 2 and restored.verified == recorded
  _assert_state_equal(restored.state, _state(2))
  assert restored.data_state == {"position": 2}
  (damaged,) = restored.damaged
  moved = tmp_path / checkpointing.DAMAGED_DIR / f"3-{tag}"
  assert (damaged.step, damaged.tag, damaged.moved_to) == (3, tag, str(moved))
  assert not step3.exists() and moved.is_dir()  # Moved aside, not deleted.
  assert damaged.reason in (moved / "DAMAGED.txt").read_text()
  assert any("step 3 is damaged" in r.getMessage() and tag in r.getMessage()
             for r in caplog.records)
  # The damaged step is never "latest" again, here nor in a fresh Checkpointer.
  assert ckpt.latest_step() == 2
  again = checkpointing.Checkpointer(str(tmp_path), keep=10)
  assert again.restore_latest(_abstract(_state(0))).damaged == ()
  again.close()

  # Training continues from step 2 and saves step 3 anew.
  ckpt.save(3, _state(30), {"position": 3})
  ckpt.close()
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
  restored = ckpt.restore_latest(_abstract(_state(0)))
  ckpt.close()
  assert (restored.step, restored.verified, restored.damaged) == (3, True, ())
  _assert_state_equal(restored.state, _state(30))


def test_several_damaged_steps_fall_back_further_and_all_damaged_is_an_error(tmp_path):
  """Two damaged steps: back two steps. All damaged: an error naming each, nothing moved;
  with start_fresh_if_all_damaged they are moved aside and None (step 0) is returned."""
  _save_steps(tmp_path)
  _damage(str(tmp_path / "checkpoints" / "3"), "garbled")
  _damage(str(tmp_path / "checkpoints" / "2"), "missing_state_metadata")
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
  restored = ckpt.restore_latest(_abstract(_state(0)))
  assert restored.step == 1 and [d.step for d in restored.damaged] == [3, 2]
  _assert_state_equal(restored.state, _state(1))
  _damage(str(tmp_path / "checkpoints" / "1"), "empty_step_folder")
  with pytest.raises(checkpointing.AllCheckpointsDamagedError,
                     match=r"(?s)nothing was moved:.*step 1 \(empty\).*start_fresh_if_all_damaged"):
    ckpt.restore_latest(_abstract(_state(0)))
  assert os.listdir(tmp_path / "checkpoints") == ["1"]
  assert ckpt.restore_latest(_abstract(_state(0)), start_fresh_if_all_damaged=True) is None
  ckpt.close()
  assert os.listdir(tmp_path / "checkpoints") == []
  assert sorted(os.listdir(tmp_path / checkpointing.DAMAGED_DIR)) == [
      "1-empty", "2-missing-state-metadata", "3-garbled"]


def test_a_second_damage_of_the_same_step_is_kept_beside_the_first(tmp_path):
  _save_steps(tmp_path, steps=(1, 2))
  for _ in range(2):
    _damage(str(tmp_path / "checkpoints" / "2"), "missing_data_metadata")
    ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
    assert ckpt.restore_latest(_abstract(_state(0))).step == 1
    ckpt.save(2, _state(2), {"position": 2})
    ckpt.close()
  assert sorted(os.listdir(tmp_path / checkpointing.DAMAGED_DIR)) == [
      "2-missing-data-metadata", "2-missing-data-metadata.2"]


def test_config_mismatch_is_an_error_not_damage(tmp_path):
  """A checkpoint that does not fit the model stops the run; nothing is moved."""
  _save_steps(tmp_path, steps=(1, 2))
  other = _state(0).replace(params={"dense": {"kernel": jnp.zeros((32, 65)),
                                              "bias": jnp.zeros((65,))}})
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
  with pytest.raises(ValueError, match="does not match the model: parameter 'dense/bias'"):
    ckpt.restore_latest(_abstract(other))
  ckpt.close()
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2"]
  assert not (tmp_path / checkpointing.DAMAGED_DIR).exists()


def test_intact_step_whose_restore_fails_is_not_moved(tmp_path):
  """A step that matches its record is intact: a restore error (here an optimizer state of
  another structure) propagates instead of discarding a good checkpoint."""
  _save_steps(tmp_path, steps=(1,))
  other = _state(0).replace(opt_state=({"nu": jnp.zeros(64)},))
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
  with pytest.raises(Exception) as err:
    ckpt.restore_latest(_abstract(other))
  ckpt.close()
  assert not isinstance(err.value, checkpointing.CheckpointDamagedError)
  assert os.listdir(tmp_path / "checkpoints") == ["1"]


@pytest.mark.parametrize("async_save", [True, False])
def test_every_finished_save_records_its_files(tmp_path, async_save):
  _save_steps(tmp_path, steps=(1, 2), async_save=async_save)
  assert checkpointing.Checkpointer(str(tmp_path), keep=10).restore_latest(
      _abstract(_state(0))) is not None
  for step in (1, 2):
    step_dir = tmp_path / "checkpoints" / str(step)
    record = json.loads((step_dir / checkpointing.GOOD_FILE).read_text())["files"]
    on_disk = sorted(str(p.relative_to(step_dir)) for p in step_dir.rglob("*")
                     if p.is_file() and p.name != checkpointing.GOOD_FILE)
    assert sorted(record) == on_disk
    assert checkpointing.check_step_dir(str(step_dir)) is True


def test_no_checkpoint_gives_none(tmp_path):
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=3)
  assert ckpt.restore_latest(_abstract(_state(0))) is None
  ckpt.close()


def test_temporary_folders_of_unfinished_saves_are_removed_by_the_next_writer(tmp_path):
  """A killed or failed save leaves `<step>.orbax-checkpoint-tmp`; the next run's
  Checkpointer (the workdir's one writer) removes it, the finished steps stay."""
  _save_steps(tmp_path, steps=(1, 2))
  stale = tmp_path / "checkpoints" / "7.orbax-checkpoint-tmp"
  (stale / "state").mkdir(parents=True)
  (stale / "state" / "junk").write_bytes(b"x" * 100)
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
  ckpt.save(3, _state(3), {"position": 3})
  ckpt.close()
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2", "3"]


def test_a_warm_start_never_copies_a_damaged_checkpoint(tmp_path):
  """init_from reads another run's checkpoint: a garbled step (which Orbax would restore
  silently) is refused, naming the file and the steps to choose from; an intact one is
  copied exactly."""
  _save_steps(tmp_path, steps=(1, 2), async_save=False)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
  place = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=place),
                          _state(0))
  params = jax.tree.map(jnp.zeros_like, _state(0).params)
  got = checkpointing.load_param_subtrees(str(tmp_path), 2, ["dense"], params, abstract)
  _assert_state_equal(got, _state(2).params)
  _damage(str(tmp_path / "checkpoints" / "2"), "garbled")
  with pytest.raises(checkpointing.CheckpointDamagedError,
                     match=r"init_from: the checkpoint .*/2 is damaged \(garbled.*SHA-256"
                           r".*init_from.step \(available: \[1, 2\]\)"):
    checkpointing.load_param_subtrees(str(tmp_path), -1, ["dense"], params, abstract)
  got = checkpointing.load_param_subtrees(str(tmp_path), 1, ["dense"], params, abstract)
  _assert_state_equal(got, _state(1).params)


def test_a_failed_save_is_one_error_naming_the_step_and_a_full_disk(tmp_path, monkeypatch,
                                                                    tiny_msum, caplog):
  """A save failing in Orbax's background thread (RESOURCE_EXHAUSTED: the disk is full)
  surfaced as a bare ValueError from inside Orbax, raised again by the run's cleanup
  ('During handling ... another exception', review s36 M2). It is now one
  CheckpointSaveError (ENOSPC) naming the checkpoint and what to do; the cleanup's repeat
  is logged, not chained; the steps saved before stay restorable."""
  import errno  # pylint: disable=import-outside-toplevel
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  real = ocp.CheckpointManager.wait_until_finished

  def fail_after_step_2(self):
    real(self)
    if any(name.startswith("4") for name in os.listdir(self.directory)):
      raise ValueError('RESOURCE_EXHAUSTED: Error writing local file "x/_sharding": '
                       "Failed writing\nmore lines")

  monkeypatch.setattr(ocp.CheckpointManager, "wait_until_finished", fail_after_step_2)
  config = tiny_msum("transformer")
  config.train.update(num_steps=6, checkpoint_every=2, eval_every=100)
  caplog.set_level("WARNING")
  with pytest.raises(checkpointing.CheckpointSaveError) as failed:
    train.train_and_evaluate(config, str(tmp_path))
  e = failed.value
  assert e.errno == errno.ENOSPC and isinstance(e, OSError)
  assert re.search(r"saving checkpoint .*checkpoints/4 failed: RESOURCE_EXHAUSTED.*"
                   r"the disk is full.*resumes from the last saved step", str(e)), str(e)
  assert e.__context__ is None or not isinstance(e.__context__,
                                                 checkpointing.CheckpointSaveError)
  assert "finishing the checkpoints failed too" in caplog.text
  # Step 2 was recorded good; the failed step 4 never is (a resume checks it first).
  assert os.path.isfile(tmp_path / "checkpoints" / "2" / checkpointing.GOOD_FILE)
  assert not os.path.isfile(tmp_path / "checkpoints" / "4" / checkpointing.GOOD_FILE)
