"""LRA ListOps (Tay et al. 2021): the value (0-9) of a nested MAX/MIN/MED/SM expression.

Expressions up to 2,000 tokens, operators nested up to 10 deep, up to 10 arguments each;
10-way classification; chance is about 10-20% (the label distribution is skewed). Sequences
are padded per batch to a multiple of ``data.pad_multiple`` (set it to a windowed encoder's
window size).

arg = '[<encoder>][,tiny][,reduced][,mlm][,short|,medium]': any registered encoder (transformer and bilstm have
tuned settings), or a model of the reproduction study (experiments/listops_study.py) at one
matched budget (width 128, the same data, batch, steps and optimiser for all):
  ran    the authors' RAN (configs/ran/official.py's encoder; windows of 128 tokens)
  star   the authors' Star-Transformer (configs/star/official.py's encoder)
  slstm  S-LSTM with the authors' switches (configs/slstm/official.py, ln + input positions)
(with 'transformer' the tuned 4-layer Transformer below). ',reduced' is the study's CPU
setting: expressions of 100-500 tokens (LRA: 500-2,000), 20k training examples, 3,000
steps; ',tiny' is a seconds-long CPU run. ',mlm' pretrains the same model with masked-LM
on the same training expressions, labels unread (self-pretraining, Amos et al. 2024, "Never
train from scratch"; the study's --pretrain_steps), for config.init_from of a classification
run (the classification head is then new; the embedding and encoder are the pretrained ones).
',short' trains the same model on short expressions (8-64 tokens; 8-32 with ',tiny'), the
same task, for a curriculum: a run with config.init_from of it and init_from.modules
including the head continues on the long expressions (the study's --curriculum_steps). The
model keeps the sizes of the long run (position tables), so all of it carries over.
',medium' is the same on 32-200-token expressions (16-48 with ',tiny'): a second curriculum
step between the short run and the long one (the study's --curriculum_mid_steps).

Launch:
  python -m longtext_jax.main --config=configs/listops.py:transformer --workdir=runs/listops
  python -m longtext_jax.main --config=configs/listops.py:transformer,tiny --workdir=/tmp/lo
  python -m longtext_jax.main --config=configs/listops.py:ran,reduced --workdir=runs/lo_ran
  python -m longtext_jax.main --config=configs/listops.py:ran,reduced,mlm --workdir=runs/lo_mlm
  python -m longtext_jax.main --config=configs/listops.py:ran,reduced --workdir=runs/lo_spt \
      --config.init_from.path=runs/lo_mlm
  python -m longtext_jax.main --config=configs/listops.py:ran,reduced,short --workdir=runs/lo_s
  python -m longtext_jax.main --config=configs/listops.py:ran,reduced,medium --workdir=runs/lo_m \
      --config.init_from.path=runs/lo_s --config.init_from.modules="('inputs','encoder','head')"
  python -m longtext_jax.main --config=configs/listops.py:ran,reduced --workdir=runs/lo_mix \
      --config.data.listops_train_min_len=8   # short expressions mixed into training
"""
from configs import common
from configs.ran import official as ran_official
from configs.slstm import official as slstm_official
from configs.star import official as star_official
from longtext_jax.data import synthetic

ENCODERS = {  # Tuned settings (common.tuned_encoder).
    "transformer": dict(num_layers=4, num_heads=4, dropout_rate=0.1,
                        position="rotary", max_len=2048, pooling="mean"),
    "bilstm": dict(num_layers=1, pooling="mean"),
}


STUDY_MODELS = ("transformer", "ran", "star", "slstm")  # experiments/listops_study.py.
RAN_WINDOW = 128  # The study's RAN windows (16 with ',tiny').
# The curriculum's lengths (min, max tokens) at every size, and with ',tiny'.
CURRICULUM_LENGTHS = {"short": ((8, 64), (8, 32)), "medium": ((32, 200), (16, 48))}


def study_encoder(model: str, c, small: bool):
  """``config.model.encoder`` of a study model (not 'transformer') at the config's sizes."""
  heads = 2 if small else 4
  # Batches are padded to a multiple of data.pad_multiple: position tables cover that.
  padded_len = -(-c.data.seq_len // c.data.pad_multiple) * c.data.pad_multiple
  if model == "ran":
    window = 16 if small else RAN_WINDOW
    c.data.pad_multiple = window
    return ran_official.official_encoder(
        num_heads=heads, head_dim=None, window_size=window, min_window_size=window // 8,
        dropout_rate=0.0 if small else 0.1)
  if model == "star":
    enc = star_official.get_config("sst").model.encoder
    enc.num_heads, enc.head_dim, enc.max_len = heads, None, padded_len
    return enc
  if model == "slstm":
    enc = slstm_official.get_config("slstm1792_ln_posinput,tiny" if small else
                                    "slstm1792_ln_posinput").model.encoder
    enc.num_steps = 2 if small else 6
    enc.max_len = padded_len
    enc.dtype = "float32"
    enc.dropout_rate = 0.0 if small else 0.1
    return enc
  raise ValueError(f"unknown study model {model!r}; choose one of {STUDY_MODELS[1:]}")


def get_config(arg: str = "transformer"):
  """arg: '[<encoder>][,tiny][,reduced][,mlm][,short|,medium]'."""
  args = common.parse_arg(
      arg, [common.Positional("encoder", tuple(sorted(set(common.ENCODER_NAMES)
                                                      | set(STUDY_MODELS))), "transformer")],
      flags=("tiny", "reduced", "mlm", "short", "medium"))
  if args["short"] and args["medium"]:
    raise ValueError(f"configs/listops.py: {arg!r}: ',short' and ',medium' are two lengths; "
                     "give one")
  c = common.experiment(
      task=dict(name="classification", num_classes=10),  # Values 0..9.
      # LRA: lengths 500-2,000, depth and arguments up to 10, 96k/2k expressions.
      data=dict(name="listops", seq_len=2000, min_len=500, listops_max_depth=10,
                listops_max_args=10, num_train=96000, num_eval=2000, batch_size=32,
                eval_batch_size=32,
                pad_multiple=128,  # Dynamic padding to a multiple of 128 tokens.
                bucket_batches=16),  # Length bucketing: less padding per batch.
      # 5 special ids + 10 digits + 4 ops + ']'.
      model=dict(vocab_size=synthetic.LISTOPS_VOCAB, d_model=128),
      optim=dict(learning_rate=5e-4, warmup_steps=1000),
      train=common.steps(5000, 1000, best_metric="accuracy"))
  if args["reduced"]:  # The study's CPU budget (docs/reproduction.md).
    common.set_fields(c, {"data.seq_len": 500, "data.min_len": 100, "data.num_train": 20_000,
                          "data.num_eval": 1000, "data.eval_batch_size": 100,
                          "optim.warmup_steps": 300, "train.num_steps": 3000,
                          "train.eval_every": 500, "train.checkpoint_every": 500,
                          "train.progress_bar": False})
  if args["tiny"]:
    common.tiny(c, 40, 20, data__seq_len=64, data__min_len=8, data__listops_max_depth=3,
                data__listops_max_args=4, data__pad_multiple=16, data__bucket_batches=4,
                **common.SMALL_DATA)
  if args["mlm"]:  # Self-pretraining: the same data, model and budget; masked-LM loss.
    common.set_fields(c, {"task.name": "mlm", "task.vocab_size": synthetic.LISTOPS_VOCAB,
                          "task.tie_embeddings": True, "data.name": "listops_mlm",
                          "train.best_metric": "loss", "train.best_mode": "min"})
  if args["encoder"] in STUDY_MODELS[1:]:
    c.model.encoder = study_encoder(args["encoder"], c, small=args["tiny"])
  else:
    c.model.encoder = common.tuned_encoder(args["encoder"], ENCODERS, c, small=args["tiny"],
                                           small_fields=dict(num_layers=1, max_len=64))
  # After the encoder: its position tables keep the long run's length.
  for flag, (lengths, tiny_lengths) in CURRICULUM_LENGTHS.items():
    if args[flag]:
      min_len, max_len = tiny_lengths if args["tiny"] else lengths
      common.set_fields(c, {"data.seq_len": max_len, "data.min_len": min_len,
                            "optim.warmup_steps": min(c.optim.warmup_steps, 200)})
  return c
