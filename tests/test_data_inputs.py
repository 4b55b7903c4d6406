"""Bad and unusual input to the local loader: each case gives its error (naming file:line and
the field) or its correct result; the loader's counts are shown; the one pair truncation; the
data info a run keeps in its workdir."""
import dataclasses
import json
import logging
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import load_config, local_config
from longtext_jax import data, tasks
from longtext_jax.data import local_files, tokenizers
from longtext_jax.data import text as text_lib

BYTES = tokenizers.ByteTokenizer()


def _config(task="classification", num_classes=2, **data_fields):
  return local_config(task, num_classes, **data_fields)


def _build(config):
  return data.build_splits(config, tasks.get_task(config.task))


def _jsonl(tmp_path, rows, name="d.jsonl", **kw):
  path = tmp_path / name
  path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)
                            for r in rows) + "\n", encoding="utf-8")
  return _config(train_path=str(path), eval_path=str(path), **kw)


def _texts(source):
  return [BYTES.decode(source[i]["input_ids"]) for i in range(len(source))]


# --- JSONL lines -------------------------------------------------------------------------

@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085"])
def test_jsonl_lines_end_at_newline_only(tmp_path, sep):
  # json.dumps(ensure_ascii=False) writes these raw; str.splitlines() would break the line.
  rows = [{"text": f"one{sep}two", "label": "a"}, {"text": "three", "label": "b"}]
  raw = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows)  # CRLF too.
  assert len(raw.splitlines()) == 3  # What the old reader split.
  (tmp_path / "d.jsonl").write_text(raw, encoding="utf-8", newline="")
  config = _config(train_path=str(tmp_path / "d.jsonl"), eval_path=str(tmp_path / "d.jsonl"))
  splits = _build(config)
  assert _texts(splits["train"]) == [f"one{sep}two", "three"]
  assert splits["train"].where == [f"{tmp_path / 'd.jsonl'}:1", f"{tmp_path / 'd.jsonl'}:2"]


# --- Text fields that are not text -------------------------------------------------------

@pytest.mark.parametrize("value,kind", [(5, "int"), (2.5, "float"), (True, "bool"),
                                        ([1, 2], "list holding non-strings"),
                                        ({"a": "b"}, "dict")])
def test_a_text_field_that_is_not_a_string_names_file_line_and_field(tmp_path, value, kind):
  config = _jsonl(tmp_path, [{"text": "ok", "label": "a"}, {"text": value, "label": "b"}])
  with pytest.raises(ValueError, match=rf"d\.jsonl:2: field 'text' must hold a text "
                                       rf"\(a string\), got a {kind}"):
    _build(config)
  # The second text of a pair is checked the same way.
  config = _jsonl(tmp_path, [{"text": "ok", "b": "x", "label": "a"},
                             {"text": "ok", "b": value, "label": "b"}], text_pair_field="b")
  with pytest.raises(ValueError, match=r"d\.jsonl:2: field 'b' must hold a text"):
    _build(config)


def test_null_text_is_an_error_naming_the_field_or_skipped_when_asked(tmp_path):
  rows = [{"text": "ok", "label": "a"}, {"text": None, "label": "b"}, {"text": "x", "label": "b"}]
  with pytest.raises(ValueError, match=r"d\.jsonl:2: field 'text' is null"):
    _build(_jsonl(tmp_path, rows))
  splits = _build(_jsonl(tmp_path, rows, on_empty="skip"))
  assert _texts(splits["train"]) == ["ok", "x"]
  assert splits["train"].stats.empty_skipped == 1


def test_a_list_of_strings_is_joined_by_spaces(tmp_path):
  # CLUE's CSL keeps its keywords as a JSON list of strings.
  splits = _build(_jsonl(tmp_path, [{"text": ["cat", "mat"], "label": "a"},
                                    {"text": "dog", "label": "b"}]))
  assert _texts(splits["train"]) == ["cat mat", "dog"]


# --- Labels ------------------------------------------------------------------------------

def test_missing_files_are_named_by_their_config_fields_before_any_reading(tmp_path):
  """Every configured file that does not exist (train, eval, test), in one error naming the
  config fields, also when only the training file is asked for (prepare_config's read: a
  typo in test_path fails at the start of a run, not after its training)."""
  config = _jsonl(tmp_path, [{"text": "a", "label": 1}, {"text": "b", "label": 0}])
  config.data.test_path = str(tmp_path / "tset.jsonl")
  config.data.eval_path = str(tmp_path / "nope" / "dev.jsonl")
  options = local_files.LocalOptions.from_config(config.data)
  for only in (None, ["train"]):
    with pytest.raises(ValueError) as e:
      local_files.read_splits(options, "label", only=only)
    message = str(e.value)
    assert message.startswith("no such file or folder: "), message
    assert "config.data.eval_path=" in message and "config.data.test_path=" in message
    assert "config.data.train_path" not in message and "tset.jsonl" in message
  config.data.eval_path = config.data.train_path
  config.data.test_path = ""
  assert len(_build(config)["train"]) == 2  # All present: read as before.


def test_training_label_outside_num_classes_names_file_line(tmp_path):
  # Integer ids: checked by the loader against [0, num_classes), naming the record.
  config = _jsonl(tmp_path, [{"text": "a", "label": 1}, {"text": "b", "label": 0},
                             {"text": "c", "label": 2}])
  with pytest.raises(ValueError, match=r"d\.jsonl:3: label 2 is outside the label set "
                                       r"\[0, 2\) \(config\.task\.num_classes=2\)"):
    _build(config)
  # Names: more names than classes; the error says where each name first occurs.
  config = _jsonl(tmp_path, [{"text": "a", "label": "x"}, {"text": "b", "label": "y"},
                             {"text": "c", "label": "z"}])
  with pytest.raises(ValueError, match=r"label set has 3 labels.*num_classes=2.*"
                                       r"'z' at .*d\.jsonl:3"):
    _build(config)
  # CSV digit labels behave as JSON ints.
  (tmp_path / "d.csv").write_text("text,label\na,0\nb,5\n")
  config = _config(train_path=str(tmp_path / "d.csv"), eval_path=str(tmp_path / "d.csv"))
  with pytest.raises(ValueError, match=r"d\.csv:3: label '5' is outside the label set"):
    _build(config)


def test_null_label_is_an_error_or_skipped_and_counted(tmp_path):
  rows = [{"text": "a", "label": "x"}, {"text": "b", "label": None},
          {"text": "c", "label": "-"}, {"text": "d", "label": "y"}]
  with pytest.raises(ValueError, match=r"d\.jsonl:2: field 'label' is null"):
    _build(_jsonl(tmp_path, rows))
  splits = _build(_jsonl(tmp_path, rows, skip_unlabeled=True))
  assert _texts(splits["train"]) == ["a", "d"]
  assert splits["train"].stats.label_skipped == 2
  assert splits["train"].label_names == ["x", "y"]


def test_headerless_tsv_with_columns_and_data_dir(tmp_path):
  (tmp_path / "t").mkdir()
  (tmp_path / "t" / "train.tsv").write_text("s1\t1\tthe cat\ns2\t0\tno\n")
  config = _config(train_path="{data_dir}/t/train.tsv", eval_path="{data_dir}/t/train.tsv",
                   columns=("id", "label", "text"))
  with pytest.raises(ValueError, match=r"train_path='\{data_dir\}/t/train\.tsv' needs "
                                       r"config\.data\.data_dir"):
    _build(config)
  config.data.data_dir = str(tmp_path)
  splits = _build(config)
  assert _texts(splits["train"]) == ["the cat", "no"]
  assert [int(splits["train"][i]["label"]) for i in range(2)] == [1, 0]
  (tmp_path / "t" / "train.tsv").write_text("s1\t1\tthe cat\ns2\t0\n")
  with pytest.raises(ValueError, match=r"train\.tsv:2: 2 columns, the header has 3"):
    _build(config)


# --- Text folders ------------------------------------------------------------------------

def _write(path, content="doc"):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(content)


def test_text_dir_rule_reads_txt_any_case_and_extensionless_skips_the_rest(tmp_path, caplog):
  root = tmp_path / "train"
  _write(root / "pos" / "1.txt", "good")
  _write(root / "pos" / "2.TXT", "great")  # Any case.
  _write(root / "pos" / "49960", "fine")  # Extension-less (20 Newsgroups).
  _write(root / "neg" / "1.Txt", "bad")
  _write(root / "neg" / "notes.md", "not a document")  # Other extension: skipped.
  _write(root / "neg" / ".hidden.txt", "dotfile")  # Hidden: skipped.
  _write(root / "pos" / ".ipynb_checkpoints" / "1-checkpoint.txt", "copy")  # Hidden folder.
  _write(root / ".ipynb_checkpoints" / "x.txt", "copy")  # Hidden folder at the top.
  _write(root / "neg" / "extra" / "deep.txt", "too deep")  # Sub-sub-folder: skipped.
  _write(root / "neg" / "extra" / "more" / "deeper.txt", "too deep")
  _write(root / "urls_pos.txt", "http://")  # Unlabelled, for a labelled task: skipped.
  config = _config(train_path=str(root), eval_path=str(root))
  with caplog.at_level(logging.WARNING):
    splits = _build(config)
  got = {(BYTES.decode(splits["train"][i]["input_ids"][1:-1]), int(splits["train"][i]["label"]))
         for i in range(len(splits["train"]))}
  assert got == {("bad", 0), ("good", 1), ("great", 1), ("fine", 1)}
  assert splits["train"].label_names == ["neg", "pos"]
  assert splits["train"].stats.files_skipped == 7
  assert "skipped 7 file(s)" in caplog.text
  # Each split's one-line summary is a WARNING (the CLI hides INFO).
  summaries = [r for r in caplog.records if "files_skipped=7" in r.getMessage()]
  assert len(summaries) == 2 and all(r.levelno == logging.WARNING for r in summaries)


def test_text_dir_unlabelled_documents_only_for_a_labelled_task_is_an_error(tmp_path):
  _write(tmp_path / "a.txt")
  config = _config(train_path=str(tmp_path), eval_path=str(tmp_path))
  with pytest.raises(ValueError, match=r"a\.txt: the task needs labels"):
    _build(config)
  _write(tmp_path / "b.pdf")
  os.remove(tmp_path / "a.txt")
  with pytest.raises(ValueError, match="no documents"):
    _build(config)


# --- Counts are shown ---------------------------------------------------------------------

def test_counts_are_logged_at_warning_per_split(tmp_path, caplog):
  raw = (b'{"text": "caf\xe9", "label": "a"}\n{"text": " ", "label": "b"}\n'
         b'{"text": "' + b"w" * 700 + b'", "label": "b"}\n')
  (tmp_path / "d.jsonl").write_bytes(raw)
  config = _config(train_path=str(tmp_path / "d.jsonl"), eval_path=str(tmp_path / "d.jsonl"),
                   on_empty="skip", max_tokens=600)
  with caplog.at_level(logging.WARNING):
    splits = _build(config)
  stats = splits["train"].stats
  assert (stats.invalid_utf8, stats.empty_skipped, stats.truncated, stats.long_docs) == (
      1, 1, 1, 1)
  lines = [r.getMessage() for r in caplog.records
           if r.levelno == logging.WARNING and "examples=2" in r.getMessage()]
  assert len(lines) == 2 and "(train)" in lines[0] and "(eval)" in lines[1]
  for key in ("empty_skipped=1", "invalid_utf8=1", "truncated=1", "long_docs=1"):
    assert key in lines[0]


# --- One longest-first truncation ---------------------------------------------------------

def _reference_truncation(la, lb, budget):
  """One token at a time from the longer text; on a tie from the one that was the shorter
  at the start (the first when they started equal), as transformers' tokenizers end up."""
  tie_cuts_a = la <= lb
  while la + lb > budget:
    if la > lb or (la == lb and tie_cuts_a):
      la -= 1
    else:
      lb -= 1
  return la, lb


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 80))
def test_truncate_longest_first_equals_the_loop(la, lb, budget):
  got = tokenizers.truncate_longest_first(la, lb, budget)
  assert got == _reference_truncation(la, lb, budget)
  assert got[0] <= la and got[1] <= lb and sum(got) == min(la + lb, budget)


def test_truncate_longest_first_gives_the_odd_token_to_the_longer_text():
  """Both cut to an odd budget: the text that was longer keeps the extra token; from equal
  lengths the second does (what transformers' BERT tokenizers do; tests/test_bert.py
  compares with them)."""
  assert tokenizers.truncate_longest_first(7, 6, 9) == (5, 4)
  assert tokenizers.truncate_longest_first(6, 7, 9) == (4, 5)
  assert tokenizers.truncate_longest_first(10, 10, 9) == (4, 5)
  assert tokenizers.truncate_longest_first(10, 3, 9) == (6, 3)  # Only the longer is cut.
  assert tokenizers.truncate_longest_first(2, 12, 9) == (2, 7)


def test_build_inputs_layout_and_segment_ids():
  a, b = BYTES.encode("abcdef"), BYTES.encode("xy")
  # 7 ids - 3 special tokens = 4 for the texts: a (the longer) is cut to 2, b keeps 2.
  ids, types, cut = tokenizers.build_inputs(BYTES, a, b, max_tokens=7)
  assert cut and BYTES.decode(ids) == "abxy"
  np.testing.assert_array_equal(ids, np.concatenate([[BYTES.cls_id], a[:2], [BYTES.sep_id],
                                                     b, [BYTES.sep_id]]))
  np.testing.assert_array_equal(types, [0, 0, 0, 0, 1, 1, 1])
  ids, types, cut = tokenizers.build_inputs(BYTES, a, None, max_tokens=0)
  assert not cut and types is None and len(ids) == 8
  ids, types, cut = tokenizers.build_inputs(BYTES, a, b, add_special_tokens=False)
  np.testing.assert_array_equal(ids, np.concatenate([a, b]))
  np.testing.assert_array_equal(types, [0] * 6 + [1] * 2)
  with pytest.raises(ValueError, match="cannot hold the 3 special tokens"):
    tokenizers.build_inputs(BYTES, a, b, max_tokens=2)


def test_build_tokenizer_names_the_kinds():
  cfg = _config().data.tokenizer
  assert isinstance(tokenizers.build_tokenizer(cfg), tokenizers.ByteTokenizer)
  cfg.kind = "bpe"
  with pytest.raises(ValueError, match=r"kind: unknown tokenizer kind 'bpe'; choose one of "
                                       r"\('byte', 'word', 'sentencepiece', 'wordpiece'\)"):
    tokenizers.build_tokenizer(cfg)
  cfg.kind = "word"  # Trainable kinds say how to get a file without one.
  with pytest.raises(ValueError, match="tokenizer.path is empty.*trains one on the training"):
    tokenizers.build_tokenizer(cfg)


# --- Data info in the workdir ------------------------------------------------------------

def test_data_info_keeps_the_label_vocabulary_without_the_training_data(tmp_path):
  rows = [{"text": "a", "label": "pos"}, {"text": "b", "label": "neg"}]
  config = _jsonl(tmp_path, rows)
  splits = _build(config)
  workdir = tmp_path / "run"
  written = data.save_data_info(str(workdir), splits, config.data.tokenizer)
  assert sorted(os.listdir(workdir)) == ["data_info.json"]  # No temporary file left.
  os.remove(tmp_path / "d.jsonl")  # The run is usable without its training data.
  info = data.load_data_info(str(workdir))
  assert info == json.loads(json.dumps(written))
  assert info["label_names"] == ["neg", "pos"]
  assert info["tokenizer"] == {"kind": "byte", "path": "", "lowercase": True,
                               "vocab_size": BYTES.vocab_size}
  assert info["splits"]["train"]["examples"] == 2
  assert info["splits"]["train"]["stats"]["examples"] == 2
  # Integer labels: ids, no names. Names given directly.
  assert data.data_info(["b", "a"])["label_names"] == ["b", "a"]
  config = _jsonl(tmp_path, [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
  assert data.save_data_info(str(workdir), _build(config))["label_names"] is None
  # A damaged or missing file is named.
  (workdir / "data_info.json").write_text("{")
  with pytest.raises(ValueError, match=r"data_info\.json: not valid JSON"):
    data.load_data_info(str(workdir))
  with pytest.raises(FileNotFoundError, match="no data info"):
    data.load_data_info(str(tmp_path / "elsewhere"))


def test_data_info_of_synthetic_sources_has_no_labels_or_tokenizer(tmp_path):
  config = load_config("masked_summation.py", "transformer,tiny")
  info = data.save_data_info(str(tmp_path), _build(config))
  assert info["label_names"] is None and info["tokenizer"] is None
  assert info["splits"]["train"]["examples"] == config.data.num_train


def test_every_local_option_is_a_config_field():
  """A new LocalOptions field needs its line in config.base_config (from_config reads it)."""
  fields = {f.name for f in dataclasses.fields(local_files.LocalOptions)} - {"fixed_length"}
  assert fields <= set(_config().data.keys())
  assert local_files.LocalOptions.from_config(_config().data).fixed_length == 0


# --- Files as users have them (2 Dec review) -----------------------------------------------

UD_SENTENCE = (
    "# sent_id = fr-1\n"
    "# text = Je vais au marché.\n"
    "1\tJe\til\tPRON\tCLS\t_\t2\tnsubj\t_\t_\n"
    "2\tvais\taller\tVERB\tV\t_\t0\troot\t_\t_\n"
    "3-4\tau\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "3\tà\tà\tADP\tP\t_\t5\tcase\t_\t_\n"
    "4\tle\tle\tDET\tDET\t_\t5\tdet\t_\t_\n"
    "4.1\tmême\tmême\tADJ\tA\t_\t_\t_\t_\t_\n"
    "5\tmarché\tmarché\tNOUN\tNC\t_\t2\tobl\t_\tSpaceAfter=No\n"
    "6\t.\t.\tPUNCT\tPONCT\t_\t2\tpunct\t_\t_\n\n")


def _records(path, fmt="", layout="tags", **options):
  opts = local_files.LocalOptions(train_path=str(path), eval_path="", format=fmt, **options)
  stats = text_lib.LoadStats()
  return local_files.read_records(str(path), local_files.infer_format(str(path), fmt), opts,
                                  layout, stats), stats


def test_conllu_reads_form_and_upos_and_skips_comments_ranges_and_empty_nodes(tmp_path):
  path = tmp_path / "fr.conllu"
  path.write_text(UD_SENTENCE * 2, encoding="utf-8")
  (rec, again), _ = _records(path)
  assert rec["words"] == ["Je", "vais", "à", "le", "marché", "."]
  assert rec["tags"] == ["PRON", "VERB", "ADP", "DET", "NOUN", "PUNCT"]  # UPOS by default.
  assert (rec["where"], again["where"]) == (f"{path}:3", f"{path}:14")
  (rec, _), _ = _records(path, tag_column=4)  # XPOS.
  assert rec["tags"] == ["CLS", "V", "P", "DET", "NC", "PONCT"]
  # Read as plain CoNLL the same file would give token ids as words: the format matters.
  (plain, _), _ = _records(path, fmt="conll")
  assert plain["words"][0] == "#"
  path.write_text(UD_SENTENCE.replace("6\t.\t.\tPUNCT\tPONCT\t_", "6 . . PUNCT PONCT _"),
                  encoding="utf-8")
  with pytest.raises(ValueError, match=r"fr\.conllu:10: 5 tab-separated columns, CoNLL-U has 10"):
    _records(path)


def test_conll_columns_split_at_spaces_and_tabs_only(tmp_path):
  path = tmp_path / "d.conll"
  path.write_text("-DOCSTART- -X- -X- O\n\nPrices NNS B-NP O\nrose\tVBD B-VP O\n"
                  "10\u00a0000 CD B-NP B-QUANT\n\u00a0\nunits NNS B-NP O\n", encoding="utf-8")
  recs, _ = _records(path, tag_column=3)
  assert [r["words"] for r in recs] == [["Prices", "rose", "10\u00a0000"], ["units"]]
  assert recs[0]["tags"] == ["O", "O", "B-QUANT"]  # A no-break space is no column break.


def test_byte_order_marks_are_dropped_and_utf16_is_an_error_naming_the_file(tmp_path):
  bom = "\ufeff"
  (tmp_path / "h.csv").write_text(bom + "text,label\ngood,pos\nbad,neg\n", encoding="utf-8")
  (tmp_path / "n.csv").write_text(bom + "good,1\nbad,0\n", encoding="utf-8")
  (tmp_path / "d.jsonl").write_text(bom + '{"text": "good", "label": "pos"}\n',
                                    encoding="utf-8")
  (tmp_path / "d.conll").write_text(bom + "-DOCSTART- O\n\nEU B-ORG\n", encoding="utf-8")
  recs, _ = _records(tmp_path / "h.csv", layout="label")
  assert [r["label"] for r in recs] == ["pos", "neg"]
  recs, _ = _records(tmp_path / "n.csv", layout="label", columns=("text", "label"))
  assert [r["label"] for r in recs] == ["1", "0"]  # Not '\ufeff1', a class of its own.
  recs, _ = _records(tmp_path / "d.jsonl", layout="label")
  assert recs[0]["text"] == "good"
  recs, _ = _records(tmp_path / "d.conll")
  assert [r["words"] for r in recs] == [["EU"]]  # -DOCSTART- recognised.
  for encoding, name in (("utf-16", "UTF-16"), ("utf-32", "UTF-32")):
    (tmp_path / "w.csv").write_bytes("text,label\ngood,pos\n".encode(encoding))
    with pytest.raises(ValueError, match=rf"w\.csv: the file is {name} .*save it as UTF-8"):
      _records(tmp_path / "w.csv", layout="label")


def test_unpaired_surrogate_escapes_are_replaced_counted_and_tokenizer_errors_name_the_line(
    tmp_path, caplog):
  path = tmp_path / "d.jsonl"
  lines = ['{"text": "ok", "label": "a"}', '{"text": "great phone \\ud83d", "label": "b"}',
           '{"text": "paired \\ud83d\\ude00 emoji", "label": "\\udc00x"}']
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  with caplog.at_level(logging.WARNING):
    recs, stats = _records(path, layout="label")
  assert recs[1]["text"] == "great phone \ufffd"
  assert recs[2]["text"] == "paired \U0001F600 emoji"  # A valid pair is one character.
  assert recs[2]["label"] == "\ufffdx"
  assert stats.invalid_utf8 == 2 and "2 unpaired surrogate" in caplog.text
  (tmp_path / "m.jsonl").write_text(lines[2].replace('"\\udc00x"', '["\\udc00x", "y"]'),
                                    encoding="utf-8")
  (rec,), stats = _records(tmp_path / "m.jsonl", layout="multi_hot")
  assert rec["labels"] == ["\ufffdx", "y"] and stats.invalid_utf8 == 1
  recs[1]["text"] = "\ud83d"  # As a record from elsewhere might hold it.

  class Strict(tokenizers.ByteTokenizer):
    def encode(self, text):
      return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32)  # Raises.
  encoder = text_lib.TextEncoder(Strict(), "none", 0, text_lib.LabelVocab(None))
  with pytest.raises(ValueError, match=r"d\.jsonl:2: could not encode this example "
                                       r"\(UnicodeEncodeError"):
    text_lib.encoded_source(recs, encoder, text_lib.LoadStats())


def test_empty_null_and_object_labels_are_errors_naming_the_line_or_skipped(tmp_path):
  (tmp_path / "d.csv").write_text("text,label\na,pos\nb, \nc,neg\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"d\.csv:3: field 'label' is empty .*skip_unlabeled"):
    _records(tmp_path / "d.csv", layout="label")
  config = _config(train_path=str(tmp_path / "d.csv"), eval_path=str(tmp_path / "d.csv"),
                   skip_unlabeled=True)
  splits = _build(config)
  assert splits["train"].label_names == ["neg", "pos"]  # No class ''.
  assert splits["train"].stats.label_skipped == 1
  rows = [{"text": "a", "label": ["x", "y"]}, {"text": "b", "label": None},
          {"text": "c", "label": []}, {"text": "d", "label": ["y", " "]}]
  path = _jsonl(tmp_path, rows).data.train_path
  with pytest.raises(ValueError, match=r"d\.jsonl:2: field 'label' is null"):
    _records(path, layout="multi_hot")
  recs, _ = _records(path, layout="multi_hot", skip_unlabeled=True)
  kept = text_lib.drop_labels(recs, (None,) + local_files.UNLABELLED, text_lib.LoadStats())
  assert [r["labels"] for r in kept] == [["x", "y"], [], ["y"]]  # No class 'None' or ''.
  path = _jsonl(tmp_path, [{"text": "a", "label": {"name": "x"}}]).data.train_path
  for layout, skip in (("label", False), ("label", True), ("multi_hot", False)):
    with pytest.raises(ValueError, match=r"d\.jsonl:1: field 'label' holds"):
      _records(path, layout=layout, skip_unlabeled=skip)


def test_text_dir_with_label_names_skips_other_folders_and_follows_linked_ones(tmp_path,
                                                                               caplog):
  root = tmp_path / "aclImdb" / "train"
  _write(root / "pos" / "0_9.txt", "great")
  _write(root / "unsup" / "0_0.txt", "unlabelled")
  _write(root / "unsup" / "1_0.txt", "unlabelled")
  _write(tmp_path / "elsewhere" / "neg" / "0_2.txt", "awful")
  os.symlink(tmp_path / "elsewhere" / "neg", root / "neg")
  recs, _ = _records(root, layout="label")
  assert sorted(r["label"] for r in recs) == ["neg", "pos", "unsup", "unsup"]  # Link read.
  with caplog.at_level(logging.WARNING):
    recs, stats = _records(root, layout="label", label_names=("neg", "pos"))
  assert sorted(r["label"] for r in recs) == ["neg", "pos"]
  assert stats.files_skipped == 2 and "unsup" in caplog.text


def test_integer_labels_are_ascii_digits_and_label_errors_stay_short():
  assert [text_lib.is_int_label(x) for x in ("12", " -3 ", "0")] == [True] * 3
  assert not any(text_lib.is_int_label(x) for x in ("\u00b2", "--1", "1.0", "", "-", "\u0663"))
  vocab = text_lib.LabelVocab([f"L{i:03d}" for i in range(300)])
  with pytest.raises(ValueError, match=r"f:1: label 'x' is outside the label set .*'L019', "
                                       r"'\.\.\.'\] \(300 labels\)$"):
    vocab.encode("x", "f:1")


def test_repeated_csv_columns_and_json_documents_are_errors_that_say_what_is_wrong(tmp_path):
  (tmp_path / "d.csv").write_text("text,label,text\na,x,b\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"d\.csv:1: column name\(s\) \['text'\] appear more"):
    _records(tmp_path / "d.csv", layout="label")
  (tmp_path / "a.json").write_text('[{"text": "a", "label": "x"},\n {"text": "b"}]\n',
                                   encoding="utf-8")
  with pytest.raises(ValueError, match=r"a\.json:1: .*must be JSON Lines"):
    _records(tmp_path / "a.json", layout="label")
  (tmp_path / "b.json").write_text('[{"text": "a", "label": "x"}]\n', encoding="utf-8")
  with pytest.raises(ValueError, match=r"b\.json:1: expected a JSON object, got list .*JSON "
                                       r"Lines"):
    _records(tmp_path / "b.json", layout="label")


def test_held_out_copies_of_training_texts_are_counted_and_named(tmp_path, caplog):
  train = _jsonl(tmp_path, [{"text": "a b", "label": "x"}, {"text": "c", "label": "y"}],
                 name="train.jsonl").data.train_path
  test = _jsonl(tmp_path, [{"text": " a  b ", "label": "x"}, {"text": "d", "label": "y"}],
                name="test.jsonl").data.train_path
  config = _config(train_path=train, eval_path=test, test_path=test)
  with caplog.at_level(logging.WARNING):
    splits = _build(config)
  assert (splits["eval"].stats.in_train, splits["train"].stats.in_train) == (1, 0)
  assert splits["test"].stats.in_train == 1
  assert "test.jsonl (test): 1 of 2 examples have the text of a training example (e.g. " \
         f"{test}:1)" in caplog.text


def _split_records(draw_labels, texts, multi):
  return [{"where": f"f:{i + 1}", "text": t,
           **({"labels": labels} if multi else {"label": labels[0]})}
          for i, (t, labels) in enumerate(zip(texts, draw_labels))]


@settings(max_examples=60, deadline=None)
@given(st.data(), st.booleans(), st.integers(0, 3))
def test_split_off_keeps_every_dev_label_in_training_and_no_copy_on_both_sides(data_, multi,
                                                                               seed):
  """Long-tailed labels (multi-label or one label) and repeated texts: the two parts cover
  the records once each, every dev label is a training label, no dev text is a training
  text, the split is seeded; without copies a single-label split is stratified as before."""
  n = data_.draw(st.integers(4, 60))
  num_labels = data_.draw(st.integers(1, 25))
  label = st.integers(0, num_labels - 1).map(lambda j: f"L{j:02d}")
  labels = data_.draw(st.lists(st.lists(label, min_size=1, max_size=4 if multi else 1,
                                        unique=True), min_size=n, max_size=n))
  texts = data_.draw(st.lists(st.sampled_from([f"doc {j}" for j in range(n)]), min_size=n,
                              max_size=n))
  recs = _split_records(labels, texts, multi)
  layout = "multi_hot" if multi else "label"
  try:
    train, dev, info = local_files.split_off(recs, 0.3, seed, layout)
  except ValueError as e:
    assert "too few to split off a dev set" in str(e)
    return
  assert sorted(r["where"] for r in train + dev) == sorted(r["where"] for r in recs)
  assert not {r["where"] for r in train} & {r["where"] for r in dev}
  key = lambda r: r.get("labels", [r.get("label")])
  assert {x for r in dev for x in key(r)} <= {x for r in train for x in key(r)}
  assert not {r["text"] for r in dev} & {r["text"] for r in train}
  assert info["examples"] == len(dev) and info["where"] == [r["where"] for r in dev]
  assert local_files.split_off(recs, 0.3, seed, layout)[1] == dev
  if not multi and len(set(texts)) == n:  # No copies: exactly the stratified draw.
    assert info["duplicates_kept_in_train"] == info["unseen_labels_kept_in_train"] == 0


def test_sparse_integer_labels_warn_and_an_empty_text_kept_without_specials_is_one_token(
    tmp_path, caplog):
  """Integer labels are class ids: 1-based ids or codes leave ids no example teaches, which
  prepare_config says (label_names silences it). An empty text kept without special tokens
  is one [UNK] (an example), not a row of no tokens (filler that no metric counts)."""
  from longtext_jax.train import prepare  # pylint: disable=import-outside-toplevel
  rows = [{"text": "a", "label": 1}, {"text": "b", "label": 2}, {"text": "", "label": 3}]
  config = _jsonl(tmp_path, rows, on_empty="keep", add_special_tokens=False)
  config.task.num_classes = 0
  with caplog.at_level(logging.WARNING):
    prepared = prepare.prepare_config(config, str(tmp_path))
  assert prepared.task.num_classes == 4
  assert "only 3 of the 4 ids [0, 4) occur (1, 2, 3)" in caplog.text
  caplog.clear()
  config.data.label_names = ("1", "2", "3")
  with caplog.at_level(logging.WARNING):
    assert prepare.prepare_config(config, str(tmp_path)).task.num_classes == 3
  assert "ids [0," not in caplog.text
  splits = _build(prepared)
  empty = splits["train"][2]
  assert list(empty["input_ids"]) == [BYTES.unk_id] and empty["mask"].all()


def test_a_home_relative_path_is_expanded(tmp_path, monkeypatch):
  monkeypatch.setenv("HOME", str(tmp_path))
  _jsonl(tmp_path, [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}])
  config = _config(train_path="~/d.jsonl", eval_path="~/d.jsonl")
  assert _texts(_build(config)["train"]) == ["a", "b"]


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_a_blank_row_of_a_one_column_file_is_an_empty_text_not_dropped_silently(
    tmp_path, fmt):
  """A one-column file (tasks lm/none): a whitespace-only line (or a quoted empty cell) is
  an example with an empty text, which on_empty judges, as it judges the same cell in a wider
  file; only empty lines are skipped."""
  quoted_empty = '""\n' if fmt == "csv" else ""  # TSV is unquoted: "" is a text there.
  path = tmp_path / f"d.{fmt}"
  path.write_text(f"text\nfirst doc\n   \n{quoted_empty}\nlast doc\n", encoding="utf-8")
  opts = local_files.LocalOptions(train_path=str(path), eval_path="", on_empty="error")
  with pytest.raises(ValueError, match=rf"d\.{fmt}:3: empty text .*on_empty='skip'"):
    local_files._read_one(str(path), opts, "none", text_lib.LoadStats())
  opts = local_files.LocalOptions(train_path=str(path), eval_path="", on_empty="skip")
  stats = text_lib.LoadStats()
  recs = local_files._read_one(str(path), opts, "none", stats)
  assert [r["text"] for r in recs] == ["first doc", "last doc"]
  assert stats.empty_skipped == (2 if fmt == "csv" else 1)
  # The same whitespace-only line in a two-column file is a blank line, not a row.
  sep = "," if fmt == "csv" else "\t"
  path.write_text(f"text{sep}id\na{sep}1\n   \nb{sep}2\n", encoding="utf-8")
  stats = text_lib.LoadStats()
  recs = local_files._read_one(str(path), opts, "none", stats)
  assert [r["text"] for r in recs] == ["a", "b"] and stats.empty_skipped == 0


def test_ambiguous_json_labels_are_errors_naming_the_line_or_one_class(tmp_path):
  """Review s36 L2: a key given twice trained on its last value; labels 1, "1" and 1.0 made
  two classes; a NaN label made a class 'nan'. Now: a repeated key and a fraction, NaN or
  infinite label are errors naming file:line; an integral float is the integer id."""
  path = _jsonl(tmp_path, ['{"text": "a", "label": "pos", "label": "neg"}']).data.train_path
  with pytest.raises(ValueError, match=r"d\.jsonl:1: key 'label' appears twice"):
    _records(path, layout="label")
  for bad in ("NaN", "Infinity", "0.5"):
    path = _jsonl(tmp_path, ['{"text": "a", "label": 1}', '{"text": "b", "label": %s}' % bad]
                  ).data.train_path
    for layout in ("label", "multi_hot"):
      with pytest.raises(ValueError, match=r"d\.jsonl:2: field 'label' holds .*regression"):
        _records(path, layout=layout)
  config = _jsonl(tmp_path, [{"text": "a", "label": 1}, {"text": "b", "label": "1"},
                             {"text": "c", "label": 1.0}, {"text": "d", "label": 0}],
                  num_classes=0)
  recs, _ = _records(config.data.train_path, layout="label")
  assert [r["label"] for r in recs] == [1, "1", 1, 0]
  vocab = text_lib.LabelVocab.build([], [r["label"] for r in recs])
  assert vocab.names is None  # Integer ids: one class 1, not '1' and '1.0'.
  assert [vocab.encode(r["label"], "x") for r in recs] == [1, 1, 1, 0]
  recs, _ = _records(_jsonl(tmp_path, [{"text": "a", "label": [2.0, "x"]}]).data.train_path,
                     layout="multi_hot")
  assert recs[0]["labels"] == [2, "x"]


def test_csv_rows_spanning_lines_are_counted_and_the_first_is_named(tmp_path, caplog):
  """Review s36 L3: a stray quote made rows 3-5 one example with no trace. A quoted cell
  with line breaks is legal CSV and stays one cell; each such row is counted
  (``multiline_rows``) and a warning names the first one's lines."""
  (tmp_path / "d.csv").write_text('text,label\nfine,pos\n"stray start,neg\nrow,pos\nend",neg\n'
                                  'last,pos\n', encoding="utf-8")
  caplog.set_level("WARNING")
  recs, stats = _records(tmp_path / "d.csv", layout="label")
  assert [r["text"] for r in recs] == ["fine", "stray start,neg\nrow,pos\nend", "last"]
  assert stats.multiline_rows == 1
  assert "d.csv: 1 row(s) span several lines" in caplog.text and "d.csv:3-5" in caplog.text
  assert [r["where"].rsplit(":", 1)[1] for r in recs] == ["2", "3", "6"]
