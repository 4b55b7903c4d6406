"""Command line for SentencePiece tokenizers with the project's fixed special ids.

Train (text files / folders of ``*.txt``, or ``--pydoc`` for the corpus shipped with Python):
  python -m longtext_jax.tokenize train --input data/wiki.txt data/books/ \
      --vocab_size 30000 --output runs/spm/en
  python -m longtext_jax.tokenize train --pydoc --vocab_size 4000 --output /tmp/spm/pydoc
writes ``<output>.model`` and ``<output>.vocab``. Then try it:
  python -m longtext_jax.tokenize encode --model /tmp/spm/pydoc.model "The assert statement"
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from longtext_jax.data import corpus
from longtext_jax.data.sentencepiece_tokenizer import (SentencePieceTokenizer, read_lines,
                                                       train_sentencepiece)


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the ``train`` or ``encode`` command; returns the exit status (0)."""
  parser = argparse.ArgumentParser(prog="python -m longtext_jax.tokenize",
                                   description=__doc__.splitlines()[0])
  sub = parser.add_subparsers(dest="command", required=True)
  train = sub.add_parser("train", help="train a SentencePiece model")
  train.add_argument("--input", nargs="*", default=[],
                     help="text files or folders (their *.txt files, recursively)")
  train.add_argument("--pydoc", action="store_true",
                     help="add Python's documentation topics (pydoc_data.topics)")
  train.add_argument("--pattern", default="*.txt", help="file glob inside folders")
  train.add_argument("--vocab_size", type=int, required=True)
  train.add_argument("--output", required=True, help="output prefix (.model/.vocab added)")
  train.add_argument("--model_type", default="unigram", choices=["unigram", "bpe", "word",
                                                                  "char"])
  train.add_argument("--character_coverage", type=float, default=1.0,
                     help="1.0 for English; ~0.9995 for Chinese")
  train.add_argument("--max_sentences", type=int, default=2_000_000)
  train.add_argument("--num_threads", type=int, default=1)
  enc = sub.add_parser("encode", help="print the pieces and ids of a text")
  enc.add_argument("--model", required=True)
  enc.add_argument("text")
  args = parser.parse_args(argv)

  if args.command == "train":
    if not args.input and not args.pydoc:
      parser.error("give --input files/folders and/or --pydoc")

    def lines():
      if args.input:
        yield from read_lines(args.input, args.pattern)
      if args.pydoc:
        yield from corpus.iter_lines(corpus.pydoc_topics())

    train_sentencepiece(lines(), args.vocab_size, args.output, model_type=args.model_type,
                        character_coverage=args.character_coverage,
                        max_sentences=args.max_sentences, num_threads=args.num_threads)
    tok = SentencePieceTokenizer(args.output + ".model")
    print(f"wrote {args.output}.model and {args.output}.vocab: {tok.vocab_size} pieces; "
          f"pad={tok.pad_id} unk={tok.unk_id} <s>={tok.cls_id} </s>={tok.sep_id} "
          f"<mask>={tok.mask_id}")
  else:
    tok = SentencePieceTokenizer(args.model)
    ids = tok.encode(args.text)
    print(" ".join(tok.pieces(ids)))
    print(" ".join(map(str, ids)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
