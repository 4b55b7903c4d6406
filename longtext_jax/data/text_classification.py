"""A pair-classification demo on the shipped corpus: ``pydoc_pairs``.

From Python's documentation topics: is B the chunk that follows A in the same document
(label 1) or a chunk of another document (label 0)? A demo and test task present on every
machine (``configs/slstm/finetune.py:pydoc_pairs``). Pairs are ``<s> A </s> B </s>`` with
``token_type_ids``, cut longest-first to ``config.data.seq_len``, encoded by the same
:class:`~longtext_jax.data.text.TextEncoder` as every text loader, with the pretraining
SentencePiece tokenizer (``config.data.tokenizer.path``, or one trained on the training
documents and cached).

GLUE/CLUE files (the former ``local_text`` source) are read by the one local loader,
``longtext_jax.data.local_files`` (``data.name='local'``; ``'local_text'`` is its alias).
"""
from __future__ import annotations

import numpy as np

from longtext_jax.data import corpus as corpus_lib
from longtext_jax.data import mlm
from longtext_jax.data import text as text_lib
from longtext_jax.data.pipeline import ArraySource


def pydoc_pairs(config) -> dict[str, ArraySource]:
  """Next-chunk prediction on Python's documentation topics (balanced, seeded).

  Returns:
    {'train', 'eval'}: stacked rows ``<s> A </s> B </s>`` padded to ``config.data.seq_len``
    (``input_ids`` int32[N, L], ``mask`` bool[N, L], ``token_type_ids`` int32[N, L], ``label``
    int32[N]: 1 when B follows A), encoded like every other pair source.
  """
  d = config.data
  train_docs, eval_docs = corpus_lib.split_documents(corpus_lib.pydoc_topics(),
                                                     d.eval_one_in)
  # The pretraining tokenizer: config.data.tokenizer, or the one cached for this corpus split.
  tokenizer = mlm.get_tokenizer(mlm.spm_path(d), train_docs,
                                d.tokenizer_vocab_size or config.model.vocab_size)
  chunk = d.chunk_words
  encoder = text_lib.TextEncoder(tokenizer, "label", 2, text_lib.LabelVocab(None, 2),
                                 max_tokens=d.seq_len)
  out = {}
  for split, docs, salt in (("train", train_docs, 1), ("eval", eval_docs, 2)):
    rng = np.random.default_rng([config.seed, salt])
    chunks = []  # (document, chunk text) in order
    for k, doc in enumerate(docs):
      words = doc.split()
      chunks.extend((k, " ".join(words[s:s + chunk])) for s in range(0, len(words) - chunk + 1,
                                                                      chunk))
    texts_a, texts_b, labels = [], [], []
    for i in range(len(chunks) - 1):
      if chunks[i][0] != chunks[i + 1][0]:
        continue
      if rng.random() < 0.5:
        j, label = i + 1, 1
      else:
        j = int(rng.integers(len(chunks)))
        while chunks[j][0] == chunks[i][0]:
          j = int(rng.integers(len(chunks)))
        label = 0
      texts_a.append(chunks[i][1])
      texts_b.append(chunks[j][1])
      labels.append(label)
    limit = d[f"num_{split}"]
    if limit and limit < len(labels):
      keep = np.sort(rng.choice(len(labels), limit, replace=False))
      texts_a = [texts_a[i] for i in keep]
      texts_b = [texts_b[i] for i in keep]
      labels = [labels[i] for i in keep]
    records = [{"where": f"pydoc pair {i} ({split})", "text": a, "text_pair": b, "label": y}
               for i, (a, b, y) in enumerate(zip(texts_a, texts_b, labels))]
    stats = text_lib.LoadStats()
    out[split] = text_lib.fixed_length(text_lib.encoded_source(records, encoder, stats),
                                       d.seq_len)
  return out
