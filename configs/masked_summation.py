"""Masked summation (Star-Transformer paper, Sec. 5.1): sum the rows whose mask bit is 1.

Inputs X in R^{n x d}: column 0 is a 0/1 mask with exactly k ones, columns 1..d-1 are
uniform in [0, 1); the target is the (d-1)-vector sum of the masked rows; loss MSE. Always
guessing k/2 gives MSE k/12 (0.83 for k=10).

arg = '[<model>][,tiny][,paper][,n=<length>][,encoder=<name>]':
  model    any registered encoder (transformer, bilstm and lstm have tuned settings; others
           get configs.common.encoder_for sizes), or a study model of the paper's Fig. 3 /
           Table 6: star | star_no_radial | star_no_ring (the authors' Star-Transformer of
           configs/star/official.py, whole / without radial / without ring connections),
           ran (configs/ran/official.py's encoder), slstm (configs/slstm/official.py's
           'slstm1792_ln_posinput' switches).
  paper    the paper's setting (Table 1): 10k train / 10k dev examples (the 10k test set is
           made by experiments/masked_summation.py), hidden size 100, 10 heads of 10, Adam at
           a constant learning rate, one dev evaluation per epoch and the best dev checkpoint
           kept (the study script stops early when the dev MSE stops improving).
  n        the sequence length (default 200, the paper's Table 6 setting).
  tiny     a seconds-long CPU run.

Launch:
  python -m longtext_jax.main --config=configs/masked_summation.py:transformer \
      --workdir=runs/msum_transformer
  python -m longtext_jax.main --config=configs/masked_summation.py:star,paper,n=200 \
      --workdir=runs/msum_star_paper
  python -m longtext_jax.main --config=configs/masked_summation.py:bilstm,tiny \
      --workdir=/tmp/msum --config.train.num_steps=50
The full sweep over n, models and seeds (test MSE, test time): experiments/masked_summation.py.
"""
from configs import common
from configs.ran import official as ran_official
from configs.slstm import official as slstm_official
from configs.star import official as star_official
from longtext_jax.config import encoder_config

ENCODERS = {  # Tuned settings (common.tuned_encoder) of the default (non-paper) setting.
    "transformer": dict(num_layers=2, num_heads=4, dropout_rate=0.0, position="learned",
                        max_len=1024, pooling="mean"),
    "bilstm": dict(num_layers=1, pooling="mean"),
    "lstm": dict(num_layers=1, pooling="mean"),
}
# The models of the paper's Fig. 3a/3b and Table 6, plus RAN and S-LSTM.
STUDY_MODELS = ("star", "star_no_radial", "star_no_ring", "transformer", "lstm", "bilstm",
                "ran", "slstm")
STAR_VARIANTS = {"star": {}, "star_no_radial": dict(radial=False),
                 "star_no_ring": dict(ring=False)}
PAPER_WIDTH, PAPER_HEADS, PAPER_HEAD_DIM = 100, 10, 10  # Table 1: H DIM, #head, head DIM.
PAPER_BATCH = 32  # Not given in the paper; 32 gives 312 updates per epoch of 10k.
PAPER_MAX_EPOCHS = 60  # Upper bound; the study stops earlier on the dev set.
ARGS = dict(positional=[common.Positional(
    "model", tuple(sorted(set(common.ENCODER_NAMES) | set(STUDY_MODELS))), "transformer")],
            flags=("tiny", "paper"), options={"n": None})


def star_encoder(variant: str, n: int, heads: int, head_dim: int | None):
  """The authors' Star-Transformer (configs/star/official.py) for features of length n.

  Dropout is off: the inputs are exact real values whose sum is the target (the official
  embedding dropout would corrupt them); nothing else differs from the official encoder.
  """
  enc = star_official.get_config("sst").model.encoder
  enc.num_heads, enc.head_dim = heads, head_dim
  enc.max_len = max(n, 8)
  enc.dropout_rate = 0.0
  for key, value in STAR_VARIANTS[variant].items():
    enc[key] = value
  return enc


def study_encoder(model: str, c, small: bool):
  """``config.model.encoder`` of a study model at the config's width and length."""
  n = c.data.seq_len
  heads, head_dim = (2, None) if small else (PAPER_HEADS, PAPER_HEAD_DIM)
  if model in STAR_VARIANTS:
    return star_encoder(model, n, heads, head_dim)
  if model == "transformer":
    return encoder_config("transformer", num_layers=2, num_heads=heads, head_dim=head_dim,
                          dropout_rate=0.0, position="learned", max_len=max(n, 8),
                          pooling="mean")
  if model in ("lstm", "bilstm"):
    return encoder_config(model, num_layers=1, pooling="mean")
  if model == "ran":
    # The authors' RAN (every field of configs/ran/official.py) sized like the others;
    # windows of 32 rows, a sum is read from the mean of the cells, dropout off.
    return ran_official.official_encoder(
        num_heads=heads, head_dim=head_dim, window_size=8 if small else 32,
        min_window_size=4 if small else 16, pooling="mean", dropout_rate=0.0)
  if model == "slstm":
    enc = slstm_official.get_config("slstm1792_ln_posinput,tiny" if small else
                                    "slstm1792_ln_posinput").model.encoder
    enc.num_steps = 2 if small else 10
    enc.max_len = max(n, 8)
    enc.dtype = "float32"
    return enc
  raise ValueError(f"unknown study model {model!r}; choose one of {STUDY_MODELS}")


def get_config(arg: str = "transformer"):
  """arg: '[<model>][,tiny][,paper][,n=<length>][,encoder=<name>]'."""
  args = common.parse_arg(arg, **ARGS)
  c = common.experiment(
      task=dict(name="regression", num_outputs=9),  # d - 1 outputs.
      # n = 200 rows of d = 10 features, k = 10 of them masked.
      data=dict(name="masked_summation", seq_len=200, num_masked=10, feature_dim=10,
                num_train=8192, num_eval=1024, batch_size=64),
      model=dict(input="features", d_model=64),
      optim=dict(learning_rate=3e-3, warmup_steps=100, weight_decay=0.0),
      train=dict(num_steps=1500, log_every=50, eval_every=500, checkpoint_every=500,
                 best_metric="mse", best_mode="min"))
  if args["paper"]:
    epoch = 10_000 // PAPER_BATCH
    common.set_fields(c, {
        "data.num_train": 10_000, "data.num_eval": 10_000,  # Train / dev (Table 1).
        "data.batch_size": PAPER_BATCH, "data.eval_batch_size": 500,
        "model.d_model": PAPER_WIDTH,
        "optim.learning_rate": 1e-3,  # Adam's default step size.
        "optim.schedule": "constant",  # Constant after warmup: early stopping decides.
        "optim.clip_norm": 5.0,  # The authors' Star-Transformer clips at 5.
        "train.num_steps": PAPER_MAX_EPOCHS * epoch,
        "train.eval_every": epoch, "train.checkpoint_every": epoch,
        "train.log_every": 104, "train.keep_checkpoints": 1,
        "train.progress_bar": False})
  if args["tiny"]:
    common.tiny(c, 60, 30, data__seq_len=24, data__num_masked=3, data__feature_dim=4,
                task__num_outputs=3, **common.SMALL_DATA)
  if args["n"] is not None:
    try:
      c.data.seq_len = int(args["n"])
    except ValueError:
      raise ValueError(f"config arg {arg!r}: n={args['n']!r} is not an integer") from None
  name = args["model"]
  if name in STUDY_MODELS and (args["paper"] or name not in common.ENCODER_NAMES):
    c.model.encoder = study_encoder(name, c, small=args["tiny"])
  else:
    c.model.encoder = common.tuned_encoder(name, ENCODERS, c, small=args["tiny"])
  common.apply_encoder_option(c, args)
  return c
