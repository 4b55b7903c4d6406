"""The results table of docs/own_corpus.md: every encoder's default command on real corpora.

Rows: two TF-IDF + logistic regression baselines (scikit-learn, experiments-only): ``tfidf``
(scikit-learn's defaults, fitted on all of train.jsonl) and ``tfidf_dev`` (fitted on the
encoders' training part only, C, word n-grams and sublinear tf chosen on their dev split: the
row that compares like with like); and
``configs/text_classification.py:local,encoder=<name>`` for each encoder, on the corpora of
``experiments/fetch_corpora.py``. Each row runs in a subprocess of its own (``--row``), so
its peak memory (``ru_maxrss``) and CPU time are its own; wall time on a shared CPU is noisy,
CPU time less so. The dev split is cut from train.jsonl (``data.eval_fraction``); test.jsonl
is only evaluated once, at the end, with the best dev checkpoint. Rows are JSON lines
(``longtext_jax.train.benchmark.emit``) appended to ``--results``; ``--table`` prints the
markdown table (mean and spread over seeds), marking rows without results 'not run' with
their command.

Usage:
  python experiments/fetch_corpora.py --out data/corpora
  nice -n 10 python experiments/own_corpus_table.py --corpora conventions news_outlets \
      --encoders tfidf transformer ran --seeds 0 --results docs/own_corpus_results.jsonl
  python experiments/own_corpus_table.py --table --results docs/own_corpus_results.jsonl

``--pretrained <HF folder>`` trains the pretrained encoders' rows from that folder (a copy
written by experiments/half_precision_copy.py is recorded as such); rows run off the CPU
record the device's kind. Both get lines of their own in the table. On a GPU machine:
``experiments/gpu_suite.sh pack`` / ``own_corpus``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = ("news_outlets", "conventions")
ENCODERS = ("transformer", "bilstm", "ran", "star_transformer", "slstm", "windowed",
            "chunk_bert", "bert_first", "bert_random", "tobert")
PRETRAINED = ("chunk_bert", "bert_first", "bert_random", "tobert")
BASELINES = ("tfidf", "tfidf_dev")  # Rows without a seed or a workdir (scikit-learn).
# tfidf_dev's grid, chosen on the dev split by accuracy (ties: the earlier entry, the
# smaller C): the inverse regularisation C, the word n-grams, sublinear tf (1 + log tf).
TFIDF_GRID = [dict(C=c, ngram_range=ngrams, sublinear_tf=sub)
              for ngrams in ((1, 1), (1, 2)) for sub in (False, True)
              for c in (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)]


def config_arg(encoder: str, tiny: bool = False, pretrained: str = "", long: bool = False
               ) -> str:
  """The ``configs/text_classification.py`` argument of an encoder row; ``pretrained`` (a HF
  folder) and ``long`` (the papers' reading, sized for a GPU) go to the pretrained encoders
  only (the others have neither)."""
  bert = encoder in PRETRAINED
  return (f"local,encoder={encoder}" + (",tiny" if tiny else "")
          + (",long" if long and bert else "")
          + (f",pretrained={pretrained}" if pretrained and bert else ""))


def parse_override(item: str, current, value: str):
  """``value`` (the text after '=' in ``--override item``) as the type of the field's
  ``current`` value: ``longtext_jax.config.parse_override`` (booleans take true/false or
  1/0, sequences a Python literal), imported on use so a TF-IDF row's process (its peak
  memory is a column) never loads JAX."""
  sys.path.insert(0, ROOT)
  from longtext_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  return config_lib.parse_override(item, current, value)


def row_workdir(root: str, corpus: str, encoder: str, seed: int,
                overrides: list[str] = (), long: bool = False) -> str:
  """A row's workdir; rows run with overrides or ``long`` get their own (a default row's is
  never reused with another config)."""
  name = f"{corpus}_{encoder}{'_long' if long and encoder in PRETRAINED else ''}_s{seed}"
  for item in overrides:
    name += "_" + item.replace("=", "-")
  return os.path.join(root, name)


def cli_command(corpus_dir: str, corpus: str, encoder: str, seed: int, workdir: str,
                tiny: bool = False, overrides: list[str] = (), pretrained: str = "",
                long: bool = False) -> str:
  """The documented command of one row (what ``--row`` runs in-process)."""
  if encoder in BASELINES:
    return (f"python experiments/own_corpus_table.py --row {encoder} --corpus {corpus} "
            f"--corpus_dir {corpus_dir}")
  return (f"python -m longtext_jax.main --config=configs/text_classification.py:"
          f"{config_arg(encoder, tiny, pretrained, long)} --workdir={workdir} "
          f"--config.seed={seed} "
          f"--config.data.train_path={corpus_dir}/{corpus}/train.jsonl "
          f"--config.data.test_path={corpus_dir}/{corpus}/test.jsonl"
          + "".join(f" --config.{item}" for item in overrides))


def _read(path: str) -> tuple[list[str], list[str]]:
  texts, labels = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        row = json.loads(line)
        texts.append(row["text"])
        labels.append(str(row["label"]))
  return texts, labels


def tfidf_row(corpus_dir: str, corpus: str) -> dict:
  """TF-IDF + logistic regression (scikit-learn defaults, max_iter raised to converge),
  trained on train.jsonl, scored on test.jsonl."""
  # pylint: disable=import-outside-toplevel
  from sklearn.feature_extraction.text import TfidfVectorizer
  from sklearn.linear_model import LogisticRegression
  from sklearn.metrics import accuracy_score, f1_score
  x_train, y_train = _read(os.path.join(corpus_dir, corpus, "train.jsonl"))
  x_test, y_test = _read(os.path.join(corpus_dir, corpus, "test.jsonl"))
  vectorizer = TfidfVectorizer()
  clf = LogisticRegression(max_iter=1000)
  clf.fit(vectorizer.fit_transform(x_train), y_train)
  pred = clf.predict(vectorizer.transform(x_test))
  return {"test/accuracy": float(accuracy_score(y_test, pred)),
          "test/macro_f1": float(f1_score(y_test, pred, average="macro"))}


def encoder_splits(corpus_dir: str, corpus: str) -> dict[str, list[dict]]:
  """The encoder rows' train / dev / test records (text and label), read and split as the
  default command reads them: train.jsonl less the dev split ``data.eval_fraction`` cuts
  off (stratified, ``data.split_seed``), and test.jsonl."""
  # pylint: disable=import-outside-toplevel
  sys.path.insert(0, ROOT)
  from configs import text_classification
  from longtext_jax.data import local_files
  c = text_classification.get_config("local")
  c.data.train_path = os.path.join(corpus_dir, corpus, "train.jsonl")
  c.data.test_path = os.path.join(corpus_dir, corpus, "test.jsonl")
  records, *_ = local_files.read_splits(local_files.LocalOptions.from_config(c.data), "label")
  return records


def tfidf_dev_row(corpus_dir: str, corpus: str) -> dict:
  """TF-IDF + logistic regression on the encoder rows' own split: fitted on their training
  part, each setting of TFIDF_GRID scored on their dev split, the best one scored once on
  test.jsonl (no refit on train + dev: the encoders never train on their dev split)."""
  # pylint: disable=import-outside-toplevel
  from sklearn.feature_extraction.text import TfidfVectorizer
  from sklearn.linear_model import LogisticRegression
  from sklearn.metrics import accuracy_score, f1_score
  splits = encoder_splits(corpus_dir, corpus)
  xy = {k: ([r["text"] for r in v], [str(r["label"]) for r in v]) for k, v in splits.items()}
  # The dev split's train.jsonl line numbers: the encoder runs' data_info.json has the same.
  dev_lines = [int(r["where"].rsplit(":", 1)[1]) for r in splits["eval"]]
  scores, best = [], None
  for setting in TFIDF_GRID:
    vectorizer = TfidfVectorizer(ngram_range=setting["ngram_range"],
                                 sublinear_tf=setting["sublinear_tf"])
    clf = LogisticRegression(C=setting["C"], max_iter=2000)
    clf.fit(vectorizer.fit_transform(xy["train"][0]), xy["train"][1])
    dev = float(accuracy_score(xy["eval"][1], clf.predict(vectorizer.transform(xy["eval"][0]))))
    scores.append({**setting, "ngram_range": list(setting["ngram_range"]), "dev/accuracy": dev})
    if best is None or dev > best[0]["dev/accuracy"]:  # Ties: the earlier setting.
      best = (scores[-1], vectorizer, clf)
  chosen, vectorizer, clf = best
  pred = clf.predict(vectorizer.transform(xy["test"][0]))
  return {"test/accuracy": float(accuracy_score(xy["test"][1], pred)),
          "test/macro_f1": float(f1_score(xy["test"][1], pred, average="macro")),
          "dev/accuracy": chosen["dev/accuracy"],
          "chosen": {k: v for k, v in chosen.items() if k != "dev/accuracy"},
          "grid": scores, "examples": {k: len(v[0]) for k, v in xy.items()},
          "dev_lines": dev_lines}


def check_step_overrides(overrides: list[str], num_epochs: float | None) -> None:
  """Refuses --override of the step counts while ``num_epochs`` > 0 (None: the configs'
  default, which is): prepare.py would set them from the epochs (the override dropped
  without a word)."""
  sys.path.insert(0, ROOT)
  from longtext_jax.train import prepare  # pylint: disable=import-outside-toplevel
  replaced = [o for o in overrides if o.partition("=")[0] in prepare.EPOCH_SET_FIELDS]
  if replaced and (num_epochs is None or num_epochs > 0):
    epochs = "the configs' default" if num_epochs is None else f"{num_epochs:g}"
    raise ValueError(f"--override {replaced}: not used while train.num_epochs ({epochs}) "
                     "sets them; add --override train.num_epochs=0")


def encoder_row(corpus_dir: str, corpus: str, encoder: str, seed: int, workdir: str,
                overrides: list[str], tiny: bool = False, pretrained: str = "",
                long: bool = False) -> dict:
  """Trains the documented default command of ``encoder`` in-process; the test metrics."""
  # pylint: disable=import-outside-toplevel
  sys.path.insert(0, ROOT)
  from configs import text_classification
  from longtext_jax import config as config_lib
  from longtext_jax import plot as plot_lib
  from longtext_jax import train
  c = text_classification.get_config(config_arg(encoder, tiny, pretrained, long))
  c.lock()
  c.seed = seed
  c.data.train_path = os.path.join(corpus_dir, corpus, "train.jsonl")
  c.data.test_path = os.path.join(corpus_dir, corpus, "test.jsonl")
  c.train.progress_bar = False
  # 'train.num_epochs=1' style, for learning-curve runs.
  config_lib.apply_overrides(c, overrides)
  check_step_overrides(overrides, c.train.num_epochs)
  out = train.train_and_evaluate(c, workdir)
  steps = plot_lib.read_metrics(workdir)  # A re-logged step (resumed run): its last record.
  curve = [{k: r[k] for k in ("step", "accuracy", "macro_f1") if k in r}
           for r in steps if r["split"] == "eval"]
  best = best_dev_point(curve)
  return {**{k: v for k, v in out.items() if k.startswith("test/")},
          "dev/accuracy": best.get("accuracy"), "dev/macro_f1": best.get("macro_f1"),
          "dev/best_step": best.get("step"), "steps": max(r["step"] for r in steps),
          "dev_curve": curve}


def device_fields(device) -> dict:
  """``device`` (platform and host cores, as the CPU rows have always said) and, off the CPU,
  ``device_kind`` (e.g. 'NVIDIA H100 80GB HBM3'): the table never averages rows of two
  kinds of machine."""
  out = {"device": f"{device.platform} ({os.cpu_count()} cores)"}
  if device.platform != "cpu":
    out["device_kind"] = device.device_kind
  return out


def weights_note(folder: str) -> str:
  """What a row's pretrained weights were: '<dtype> copy' for a folder written by
  experiments/half_precision_copy.py (rounded weights), else 'original'."""
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import half_precision_copy  # pylint: disable=import-outside-toplevel
  marker = half_precision_copy.read_marker(folder)
  return "original" if marker is None else f"{marker['dtype']} copy"


def method_name(row: dict) -> str:
  """A row's method cell: the encoder (and its config flags: ``long``), and the machine and
  weights where they are not the CPU and the original checkpoint."""
  if row["encoder"] == "tfidf":
    return "TF-IDF + LR (defaults, all of train.jsonl)"
  if row["encoder"] == "tfidf_dev":
    return "TF-IDF + LR (tuned on the dev split)"
  flags = "".join(f",{f}" for f in row.get("flags", []))
  notes = [row["device_kind"]] if row.get("device_kind") else []
  if row.get("weights", "original") != "original":
    notes.append(f"{row['weights']} of the weights")
  return (f"`encoder={row['encoder']}{flags}`"
          + (f" ({', '.join(notes)})" if notes else ""))


def best_dev_point(curve: list[dict]) -> dict:
  """The dev evaluation whose checkpoint the test split was scored with: the highest
  accuracy, of ties the newest (the trainer's ``train.best_metric`` rule); {} if none."""
  scored = [p for p in curve if "accuracy" in p]
  return max(scored, key=lambda p: (p["accuracy"], p["step"])) if scored else {}


def run_row(args) -> int:
  """``--row``: one row in this process; prints one JSON line with time and memory."""
  t0, r0 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
  if args.row == "tfidf":
    row = tfidf_row(args.corpus_dir, args.corpus)
  elif args.row == "tfidf_dev":
    row = tfidf_dev_row(args.corpus_dir, args.corpus)
  else:
    row = encoder_row(args.corpus_dir, args.corpus, args.row, args.seed, args.workdir,
                      args.override, args.tiny, args.pretrained, args.long)
  r1 = resource.getrusage(resource.RUSAGE_SELF)
  row.update(corpus=args.corpus, encoder=args.row, seed=args.seed,
             wall_s=round(time.time() - t0, 1),
             cpu_s=round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 1),
             peak_rss_mib=round(r1.ru_maxrss / 1024, 1))
  from longtext_jax.train import benchmark  # pylint: disable=import-outside-toplevel
  benchmark.emit(row)
  return 0


def row_key(row: dict) -> tuple:
  """What makes two result rows the same run: corpus, encoder, seed, overrides, tiny, config
  flags, weights and machine kind. A rerun of the same command gives the same key (its
  workdir resumes and returns the stored test metrics)."""
  return (row["corpus"], row["encoder"], row["seed"], tuple(row.get("overrides", ())),
          bool(row.get("tiny")), tuple(row.get("flags", ())), row.get("weights", "original"),
          row.get("device_kind", ""))


def read_rows(path: str) -> list[dict]:
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(x) for x in f if x.strip()]


def run_all(args) -> int:
  """Runs each (corpus, encoder, seed) row in a subprocess, appending to --results. A row
  that --results already holds a test result for (same :func:`row_key`) is skipped, unless
  --rerun (then the table keeps the newer)."""
  import jax  # pylint: disable=import-outside-toplevel
  if not args.tiny:  # Before any row runs (the tiny configs count steps already).
    epochs = [o.partition("=")[2] for o in args.override
              if o.partition("=")[0] == "train.num_epochs"]
    check_step_overrides(args.override, float(epochs[-1]) if epochs else None)
  finished = {row_key(r) for r in read_rows(args.results) if "test/accuracy" in r}
  machine = device_fields(jax.devices()[0])
  for corpus in args.corpora:
    for encoder in args.encoders:
      for seed in ([0] if encoder in BASELINES else args.seeds):
        long = args.long and encoder in PRETRAINED
        planned = {"corpus": corpus, "encoder": encoder, "seed": seed,
                   "overrides": list(args.override), "tiny": args.tiny,
                   "flags": ["long"] if long else [], **machine}
        if args.pretrained and encoder in PRETRAINED:
          planned["weights"] = weights_note(args.pretrained)
        if row_key(planned) in finished and not args.rerun:
          print(f"# {corpus} {encoder} seed {seed}: already in {args.results} (--rerun to "
                "run it again)", flush=True)
          continue
        workdir = row_workdir(args.workdir, corpus, encoder, seed, args.override, long)
        cmd = [sys.executable, os.path.abspath(__file__), "--row", encoder, "--corpus",
               corpus, "--corpus_dir", args.corpus_dir, "--seed", str(seed), "--workdir",
               workdir] + [f"--override={o}" for o in args.override] + (
                   ["--tiny"] if args.tiny else []) + (
                       ["--pretrained", args.pretrained] if args.pretrained else []) + (
                           ["--long"] if long else [])
        command = cli_command(args.corpus_dir, corpus, encoder, seed, workdir, args.tiny,
                              args.override, args.pretrained, long)
        print("#", command, flush=True)
        try:
          proc = subprocess.run(cmd, capture_output=True, text=True,
                                timeout=args.timeout_min * 60, cwd=ROOT)
        except subprocess.TimeoutExpired:
          row = {"corpus": corpus, "encoder": encoder, "seed": seed,
                 "status": f"stopped at the {args.timeout_min}-minute limit"}
        else:
          lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
          row = json.loads(lines[-1]) if proc.returncode == 0 and lines else {
              "corpus": corpus, "encoder": encoder, "seed": seed,
              "status": f"failed: {proc.stderr.strip().splitlines()[-1:]}"}
        row.update(command=command, overrides=list(args.override), tiny=args.tiny,
                   jax=jax.__version__, **device_fields(jax.devices()[0]))
        if args.pretrained and encoder in PRETRAINED:
          row["weights"] = weights_note(args.pretrained)
        if long:
          row["flags"] = ["long"]
        os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
        with open(args.results, "a", encoding="utf-8") as f:
          f.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k != "dev_curve"}), flush=True)
  return 0


def table(args) -> str:
  """The markdown table of --results: mean ± spread over seeds; missing rows 'not run'."""
  rows = [r for r in read_rows(args.results) if not r.get("tiny")]  # Tiny: smoke runs.
  # One row per run (row_key): a result appended twice (a --rerun, or a file from before
  # rows were skipped) is counted once, the later one kept; a seed never counts twice.
  latest: dict[tuple, dict] = {}
  for r in rows:
    key = row_key(r) if "test/accuracy" in r else (id(r),)
    if key in latest:
      print(f"note: {args.results} repeats {key[:3]}: the later row is used", file=sys.stderr)
    latest[key] = r
  rows = list(latest.values())
  # Rows run with --override (learning curves, reduced budgets) are not the default
  # command's: listed one by one after the table, never averaged into it.
  other = [r for r in rows if r.get("overrides") and "test/accuracy" in r
           and r["corpus"] in args.corpora]
  rows = [r for r in rows if not r.get("overrides")]
  lines = ["| corpus | method | seeds | best dev accuracy | test accuracy | test macro-F1 | "
           "steps | CPU s | wall s | peak RSS MiB |", "|---|---|---|---|---|---|---|---|---|---|"]

  def stat(values):
    values = [100 * v for v in values]
    if len(values) == 1:
      return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"

  def dev_stat(values):  # The defaults' TF-IDF row has no dev split.
    return "-" if None in values else stat(values)

  def best_dev(row):  # Dev accuracy of the checkpoint (or setting) scored on test.
    return best_dev_point(row.get("dev_curve", [])).get("accuracy", row.get("dev/accuracy"))

  def steps(done):
    return f"{statistics.mean(r['steps'] for r in done):.0f}" if "steps" in done[0] else "-"

  def group_line(corpus, name, done):
    return (f"| {corpus} | {name} | {len(done)} | "
            f"{dev_stat([best_dev(r) for r in done])} | "
            f"{stat([r['test/accuracy'] for r in done])} | "
            f"{stat([r['test/macro_f1'] for r in done])} | "
            f"{steps(done)} | "
            f"{statistics.mean(r['cpu_s'] for r in done):.0f} | "
            f"{statistics.mean(r['wall_s'] for r in done):.0f} | "
            f"{max(r['peak_rss_mib'] for r in done):.0f} |")

  for corpus in args.corpora:
    for encoder in BASELINES + ENCODERS:
      mine = [r for r in rows if r["corpus"] == corpus and r["encoder"] == encoder]
      done = [r for r in mine if "test/accuracy" in r]
      default = method_name({"encoder": encoder})
      # The default command's line (CPU, no flags), then lines of their own for rows of
      # another machine, of rounded weights or of a config flag; never averaged together.
      groups: dict[str, list[dict]] = {default: []}
      for r in sorted(done, key=lambda r: (bool(r.get("device_kind")), method_name(r))):
        groups.setdefault(method_name(r), []).append(r)
      for name, group in groups.items():
        if group:
          lines.append(group_line(corpus, name, group))
        else:
          why = next((r["status"] for r in mine if "status" in r and method_name(r) == name),
                     "not run")
          lines.append(f"| {corpus} | {name} | - | - | {why} | - | - | - | - | - |")
  if other:
    lines += ["", "Rows run with overrides (not the default command; one line per run):", "",
              "| corpus | method | overrides | seed | best dev accuracy | test accuracy | "
              "test macro-F1 | steps | CPU s | wall s | peak RSS MiB |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {name: i for i, name in enumerate(BASELINES + ENCODERS)}
    other.sort(key=lambda r: (args.corpora.index(r["corpus"]), order.get(r["encoder"], 99),
                              r["overrides"], r["seed"]))
    for r in other:
      # A row run as the default command before that default changed: the new default plus
      # the old value, marked as such ('superseded_default' says when and why).
      was = " (the earlier default)" if r.get("superseded_default") else ""
      lines.append(
          f"| {r['corpus']} | {method_name(r)} | "
          f"{' '.join(f'`{o}`' for o in r['overrides'])}{was} | {r['seed']} | "
          f"{dev_stat([best_dev(r)])} | {stat([r['test/accuracy']])} | "
          f"{stat([r['test/macro_f1']])} | {r.get('steps', '-')} | {r['cpu_s']:.0f} | "
          f"{r['wall_s']:.0f} | {r['peak_rss_mib']:.0f} |")
  lines += ["", "Each row's command (seed 0; `--config.seed=1`, `2` for the others):", "",
            "```bash", cli_command(args.corpus_dir, "<corpus>", "tfidf", 0, ""),
            cli_command(args.corpus_dir, "<corpus>", "tfidf_dev", 0, ""),
            cli_command(args.corpus_dir, "<corpus>", "<encoder>", 0,
                        "runs/<corpus>_<encoder>_s0"), "```"]
  return "\n".join(lines)


def main(argv=None) -> int:
  """CLI: --row (one row, in-process), --table (print), else run the rows asked for."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--corpus_dir", default="data/corpora")
  p.add_argument("--corpora", nargs="+", default=list(CORPORA))
  p.add_argument("--encoders", nargs="+", default=["tfidf"],
                 help=f"{' and/or '.join(BASELINES)} and/or encoders of {ENCODERS}")
  p.add_argument("--seeds", nargs="+", type=int, default=[0])
  p.add_argument("--workdir", default=None,
                 help="the rows' run folders (default runs/own_corpus; with --tiny "
                      "runs/own_corpus_tiny)")
  p.add_argument("--results", default=None,
                 help="results file, appended to (default docs/own_corpus_results.jsonl; "
                      "with --tiny runs/own_corpus_tiny/results.jsonl: tiny rows stay out "
                      "of the docs unless told to)")
  p.add_argument("--timeout_min", type=float, default=15.0, help="CPU budget of one run")
  p.add_argument("--override", action="append", default=[],
                 help="config field=value for every encoder row (learning curves)")
  p.add_argument("--pretrained", default="",
                 help="HF folder for the pretrained encoders' rows (default: the bundled "
                 "MiniLM); a copy of experiments/half_precision_copy.py is marked as such")
  p.add_argument("--long", action="store_true",
                 help="the pretrained encoders' rows with the config flag 'long' (the papers' "
                 "reading: up to 2048 word pieces, 4 epochs; sized for a GPU)")
  p.add_argument("--tiny", action="store_true",
                 help="the configs' tiny variant (seconds; what the test runs)")
  p.add_argument("--rerun", action="store_true",
                 help="run rows that --results already holds (the table keeps the newer)")
  p.add_argument("--table", action="store_true", help="print the markdown table and exit")
  p.add_argument("--row", help="internal: run one row here (a baseline or an encoder)")
  p.add_argument("--corpus", help="internal: the row's corpus")
  p.add_argument("--seed", type=int, default=0, help="internal: the row's seed")
  args = p.parse_args(argv)
  home = os.path.join(ROOT, "runs", "own_corpus_tiny") if args.tiny else None
  args.workdir = args.workdir or home or "runs/own_corpus"
  args.results = args.results or (os.path.join(home, "results.jsonl") if home else
                                  "docs/own_corpus_results.jsonl")
  if args.row:
    return run_row(args)
  if args.table:
    print(table(args))
    return 0
  return run_all(args)


if __name__ == "__main__":
  sys.exit(main())
