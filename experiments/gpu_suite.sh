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
# Each step's rows are streamed to $OUT/<step>.log as JSON lines, so a step cut short by
# its time limit still leaves the rows it measured. PYTHON defaults to python3.
set -u
PY=${PYTHON:-python3}
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
  *) echo "usage: OUT=dir bash experiments/gpu_suite.sh harness|recurrent|rest|cudnn" >&2; exit 2 ;;
esac
