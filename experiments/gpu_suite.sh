#!/usr/bin/env bash
# The GPU rows of docs/benchmarks.md and docs/reproduction.md, in two parts that each fit a
# 10-minute lease call (device tool) or run one after the other on any GPU machine:
#
#   OUT=/tmp/gpu bash experiments/gpu_suite.sh harness   # all encoders, fp32 and bf16
#   OUT=/tmp/gpu bash experiments/gpu_suite.sh recurrent # S-LSTM/Star fwd vs fwd+bwd, RAN
#                                                        # layouts, GRN inference speed
#   OUT=/tmp/gpu bash experiments/gpu_suite.sh rest      # what the first two did not reach
#                                                        # in their limits on an H100
#   OUT=/tmp/gpu bash experiments/gpu_suite.sh cudnn     # the Transformer on cuDNN attention
#
# The pretrained rows of docs/own_corpus.md at the papers' reading (config flag 'long': up to
# 2048 word pieces, 4 epochs; hours on a CPU) on news_outlets (issue 18), in two steps:
#
#   bash experiments/gpu_suite.sh pack       # HERE, once: .gpu_carry/ (~50 MB: the bundled
#                                            # MiniLM as float16, the news_outlets corpus)
#   OUT=/tmp/gpu ENCODERS="bert_first" SEEDS="0 1 2" bash experiments/gpu_suite.sh own_corpus
#                                            # THERE, carrying .gpu_carry and .whl: rows
#                                            # appended to $OUT/own_corpus_results.jsonl
#
# The float16 copy is what fits the device tool's 64 MiB working tree (88 MB in float32);
# the rows say 'float16 copy' (experiments/half_precision_copy.py). Append the rows to
# docs/own_corpus_results.jsonl and rerun `own_corpus_table.py --table`. CARRY (default
# .gpu_carry), BERT (pack: another HF folder), CORPUS_DIR (pack: default data/corpora),
# TINY=1 (own_corpus: the tiny configs, what the test runs) and LIMIT (own_corpus: seconds,
# default 560) change the defaults.
#
#   OUT=/tmp/gpu MODELS=slstm bash experiments/gpu_suite.sh listops   # ListOps, reduced budget
#
# Each step's rows are streamed to $OUT/<step>.log as JSON lines, so a step cut short by
# its time limit still leaves the rows it measured. PYTHON defaults to python3.
set -u
PY=${PYTHON:-python3}
if [ "${1:-}" = pack ]; then  # Runs here: the project's virtualenv when there is one.
  OUT=${OUT:-/tmp}
  if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
fi
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}.
step() {  # step NAME SECONDS COMMAND...: runs COMMAND with a time limit, logs to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date -u +%T))"
  PYTHONUNBUFFERED=1 timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "   exit $? after $SECONDS s total"
  grep -v '^{' "$OUT/$name.log" | tail -n 3
}
case ${1:-} in
  harness)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    $PY -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
    step harness_fp32 230 $PY experiments/benchmark.py --lengths=4096,16384 --repeats=5 \
        --max_seconds=10 --matmul_size=8192 --out="$OUT/harness_fp32"
    step harness_bf16 230 $PY experiments/benchmark.py --lengths=4096,16384 --repeats=5 \
        --max_seconds=10 --matmul_size=8192 --dtype=bfloat16 --attention_impl=cudnn \
        --out="$OUT/harness_bf16"
    step transformer_util 60 $PY experiments/benchmark.py --encoders=transformer \
        --lengths=4096,16384 --d_model=1024 --batch=4 --repeats=5 --matmul_size=8192 \
        --dtype=bfloat16 --attention_impl=cudnn --out="$OUT/transformer_util"
    ;;
  recurrent)
    step recurrent 200 $PY experiments/recurrent_speed.py --encoders=slstm,star_transformer \
        --cases=128x1x512,128x1x2048,128x1x8192,256x8x512,256x8x2048,256x8x8192 \
        --repeats=5 --out="$OUT/recurrent_gpu.json"
    step ran_layouts 200 $PY experiments/recurrent_speed.py --encoders=ran \
        --cases=64x1x4096,64x1x16384,128x8x4096,128x8x16384 --repeats=5 \
        --out="$OUT/ran_layouts_gpu.json"
    step grn_speed 120 $PY experiments/grn_speed.py --out="$OUT/grn_speed_gpu.json"
    ;;
  rest)
    # The harness at L=16k for the encoders after the LSTMs (which took most of the harness
    # steps' time on an H100), the Transformer with JAX's default attention in bf16 (cuDNN
    # refused its padding mask), its utilisation at D=1024, and the last recurrent cases.
    rest=star_transformer,slstm,chunk_bert,bert_first,bert_random,tobert,bert
    step rest_fp32 130 $PY experiments/benchmark.py --encoders=$rest --lengths=16384 \
        --repeats=3 --matmul_size=8192 --out="$OUT/rest_fp32"
    step rest_bf16 140 $PY experiments/benchmark.py --encoders=transformer,$rest \
        --lengths=16384 --repeats=3 --matmul_size=8192 --dtype=bfloat16 --out="$OUT/rest_bf16"
    step transformer_util_xla 70 $PY experiments/benchmark.py --encoders=transformer \
        --lengths=4096 --d_model=1024 --batch=4 --repeats=5 --matmul_size=8192 \
        --dtype=bfloat16 --out="$OUT/transformer_util_xla"
    step recurrent_rest 80 $PY experiments/recurrent_speed.py --encoders=star_transformer \
        --cases=256x8x2048,256x8x8192 --repeats=5 --out="$OUT/recurrent_rest_gpu.json"
    ;;
  cudnn)
    step cudnn_check 60 $PY experiments/cudnn_check.py
    step cudnn_harness 90 $PY experiments/benchmark.py --encoders=transformer \
        --lengths=4096,16384 --repeats=5 --matmul_size=8192 --dtype=bfloat16 \
        --attention_impl=cudnn --out="$OUT/cudnn_harness"
    step cudnn_util 60 $PY experiments/benchmark.py --encoders=transformer \
        --lengths=4096 --d_model=1024 --batch=4 --repeats=5 --matmul_size=8192 \
        --dtype=bfloat16 --attention_impl=cudnn --out="$OUT/cudnn_util"
    ;;
  pack)
    CARRY=${CARRY:-.gpu_carry}
    mkdir -p "$CARRY"
    $PY experiments/half_precision_copy.py ${BERT:+--src "$BERT"} --out "$CARRY/bert_fp16" \
        || exit 1
    tar -czf "$CARRY/corpora.tgz" -C "${CORPUS_DIR:-data/corpora}" news_outlets || exit 1
    du -sh "$CARRY"
    ;;
  own_corpus)
    CARRY=${CARRY:-.gpu_carry}
    mkdir -p "$CARRY/corpora" && tar -xzf "$CARRY/corpora.tgz" -C "$CARRY/corpora" || exit 1
    $PY -c "import jax; print('jax', jax.__version__, jax.devices())"
    # shellcheck disable=SC2086  # ENCODERS and SEEDS are lists.
    step own_corpus "${LIMIT:-560}" $PY experiments/own_corpus_table.py \
        --corpus_dir "$CARRY/corpora" --corpora news_outlets \
        --encoders ${ENCODERS:-bert_first} --seeds ${SEEDS:-0 1 2} \
        --pretrained "$CARRY/bert_fp16" --workdir "${WORKDIR:-/tmp/own_corpus_gpu}" \
        --results "$OUT/own_corpus_results.jsonl" --timeout_min 9 ${TINY:+--tiny} --long
    grep -v '^{' "$OUT/own_corpus.log" | grep -v '^#' | tail -n 5
    ;;
  listops)
    # The ListOps runs this CPU did not reach (issue 19; docs/reproduction.md): MODELS
    # (default slstm; ~15 h here), SEEDS (default 0), SIZE (reduced; tiny in the test).
    step listops "${LIMIT:-560}" $PY experiments/listops_study.py "--${SIZE:-reduced}" \
        --models "${MODELS:-slstm}" --seeds "${SEEDS:-0}" \
        --workdir "${WORKDIR:-/tmp/listops_gpu}" --out "$OUT/listops.json"
    grep '^{' "$OUT/listops.log" | tail -n 4
    ;;
  *) echo "usage: OUT=dir bash experiments/gpu_suite.sh harness|recurrent|rest|cudnn|pack|own_corpus|listops" >&2
     exit 2 ;;
esac
