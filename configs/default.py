"""The default experiment of `make demo`: RAN on a generated long-document task.

Documents of 256-512 tokens cut into windows of 64; the label is the class of one marker token
in the document's last 64 tokens, so the GPC recurrence and memory review must carry it across
windows to the output (see configs/ran/demo.py, whose arg it takes). 1.2-4 minutes on 2 CPU
cores, by host (README); reaches accuracy 1.0 on the held-out split.

Launch:
  python -m longtext_jax.main --config=configs/default.py --workdir=runs/demo

The previous default (masked summation with the full-attention Transformer) is
configs/masked_summation.py:transformer.
"""
from configs.ran import demo

get_config = demo.get_config
