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
# Issue 19's training runs that this CPU does not reach in a session, as parallel queues on
# one GPU, and RAN's unrolled loop over windows timed (experiments/ran_gpu_speed.py) after
# them, alone on the device (its compiles overlap the queues):
#
#   OUT=/tmp/gpu T1=400 bash experiments/gpu_suite.sh studies
#
# T1 (seconds, default 400) is each queue's time limit; QUEUES="5 6 7" runs the ListOps
# curriculum chains instead (see the queues below). Each queue is one study command
# (masked_summation.py or listops_study.py over a list of cells); at T1 it gets SIGTERM
# alone (not its compiler subprocesses: a SIGTERM to the whole group killed ptxas mid-compile
# on 26 Nov and the run died with "ptxas exited with non-zero error code 15"), so the trainer
# saves its step and stops. The finished runs' result.json files, the ListOps results and
# every log go to $OUT/studies.tgz; the checkpoints of the runs a queue cut go to
# $OUT/unfinished.tgz (up to 15 MiB, smallest runs first), which resume here: untar into
# runs/ with msum/ renamed (`tar -xzf $OUT/unfinished.tgz -C runs --transform
# 's,^msum,masked_summation,'`) and rerun the study command (a moved run resumes from its
# step: tests/test_reproduction.py); the timing rows
# go to $OUT/ran_gpu_*.json. QUEUES picks queues by number (default "1 2 4": three at once;
# eight at once on 26 Nov ran each 3-5x slower than alone, see docs/masked_summation.md "On a
# GPU"); TINY=1 the tiny sizes (the test). Merging them here: docs/reproduction.md, "Runs
# trained elsewhere". `OUT=/tmp/gpu bash experiments/gpu_suite.sh collect` packs WORKDIR's
# results and cut runs again (what `studies` does at its end), e.g. after a cut session.
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
STUDIES=${WORKDIR:-/tmp/studies}  # The studies' run folders (parts studies and collect).
step() {  # step NAME SECONDS COMMAND...: runs COMMAND with a time limit, logs to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date -u +%T))"
  PYTHONUNBUFFERED=1 timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "   exit $? after $SECONDS s total"
  grep -v '^{' "$OUT/$name.log" | tail -n 3
}
collect() {  # collect W: the studies' results and logs, and the runs a queue cut, into $OUT
  local W=$1
  rm -f "$OUT/unfinished.tgz"
  (cd "$W" && find . -name result.json -o -name 'listops_q*.json' -o -name '*.log' \
      -o -name metrics.jsonl | tar -czf "$OUT/studies.tgz" -T -)
  # The runs a queue cut (a checkpoint, no result.json), smallest first, up to 15 MiB; a
  # curriculum phase (<base>_short, <base>_medium) only while no run after it finished.
  (cd "$W" && for run in msum/* listops/*; do
     [ -d "$run/checkpoints" ] && [ ! -e "$run/result.json" ] || continue
     base=${run%_short}; base=${base%_medium}; done_after=
     if [ "$base" != "$run" ]; then
       for f in "$base"/result.json "$base"_*/result.json; do
         [ -e "$f" ] && done_after=1
       done
     fi
     [ -z "$done_after" ] && du -sk "$run"
   done | sort -n | awk '{t += $1; if (t <= 15 * 1024) print $2}' > unfinished.txt
   if [ -s unfinished.txt ]; then tar -czf "$OUT/unfinished.tgz" -T unfinished.txt; fi)
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
    step ran_layouts 200 $PY experiments/recurrent_speed.py --encoders=ran_blocks \
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
    # The Star-Transformer's first cycle reusing its keys and values for the embedding slot
    # (6 Dec) against the scan it replaced (docs/benchmarks.md, "The first cycle's
    # embedding slot"; CPU only so far).
    step star_first_cycle 90 $PY experiments/recurrent_speed.py --encoders=star_first_cycle \
        --cases=128x1x2048,256x8x2048,256x8x8192 --repeats=5 \
        --out="$OUT/star_first_cycle_gpu.json"
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
  studies)
    W=$STUDIES; T1=${T1:-400}; mkdir -p "$W/logs"; rm -f "$W"/go*
    export XLA_PYTHON_CLIENT_PREALLOCATE=false  # Several processes share the one GPU.
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    $PY -c "import jax, flax, orbax.checkpoint as o; print('jax', jax.__version__, 'flax', flax.__version__, 'orbax', o.__version__, jax.devices())"
    bench() {  # bench NAME WAIT DONE XLA_FLAGS ARGS...: compiles now, times once WAIT exists.
      local name=$1 wait=$2 done=$3 flags=$4; shift 4
      (XLA_FLAGS="$flags" PYTHONUNBUFFERED=1 timeout $((T1 + 170)) $PY \
          experiments/ran_gpu_speed.py --wait "$W/$wait" --done "$W/$done" \
          --out "$OUT/ran_gpu_$name.json" "$@" ${TINY:+--tiny} > "$W/logs/ran_gpu_$name.log" 2>&1
       touch "$W/$done") &
    }
    # What 26 Nov did not reach: D=128 batch 8 (1.48x the scan rolled) and 16 windows per
    # iteration (docs/benchmarks.md, "GPU: RAN's loop over windows unrolled").
    bench fp32 go go2 "" --label=fp32 --cases=128x8x16384,64x1x16384 --unrolls=1,8,16
    bench bf16 go2 go3 "" --label=bf16 --dtype=bfloat16 --cases=128x1x16384 --unrolls=8,16
    # Smoke: the trainer with this machine's packages (pinned flax/orbax from .whl/pin if not).
    if ! timeout 120 $PY experiments/masked_summation.py --tiny --models transformer \
        --lengths 50 --seeds 0 --workdir "$W/smoke" --out_dir "$W/smoke" \
        > "$W/logs/smoke.log" 2>&1; then
      echo "smoke failed ($(tail -n 1 "$W/logs/smoke.log")): pinned flax/orbax"
      $PY -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/pin/*.whl
      timeout 120 $PY experiments/masked_summation.py --tiny --models transformer \
          --lengths 50 --seeds 0 --workdir "$W/smoke2" --out_dir "$W/smoke2" \
          > "$W/logs/smoke2.log" 2>&1 || echo "smoke failed again: $(tail -n 3 "$W/logs/smoke2.log")"
    fi
    # TINY=1: the tiny sizes (seconds; what the test runs on a CPU).
    if [ -n "${TINY:-}" ]; then ms_size=--tiny; lo_size=--tiny
    else ms_size=--full; lo_size=--reduced; fi
    queue() {  # queue N STUDY [--full] ARGS...: one study command under T1; SIGTERM to it
      local n=$1 study=$2; shift 2  # alone. --full: that size instead (not with TINY).
      case " ${QUEUES:-1 2 4} " in *" $n "*) ;; *) return ;; esac
      local size=$ms_size dir=msum
      if [ "$study" = listops_study ]; then size=$lo_size; dir=listops; fi
      if [ "${1:-}" = --full ]; then shift; [ -z "${TINY:-}" ] && size=--full; fi
      (PYTHONUNBUFFERED=1 timeout --foreground -k 30 "$T1" $PY "experiments/$study.py" \
          $size --workdir "$W/$dir" "$@" > "$W/logs/q$n.log" 2>&1
       echo "queue $n exit $? at $SECONDS s" >> "$W/logs/q$n.log") &
      QPIDS="${QPIDS:-} $!"
    }
    # Issue 19's open cells, most wanted first (docs/reproduction.md, 6 Dec); each queue's
    # cells run in turn (lengths, then seeds, then models). The S-LSTM's masked-summation
    # seeds 1-2 at n=200 (4 Dec) and its ListOps seeds 1-2 (queue 3 until 6 Dec) ran on the
    # CPU.
    queue 1 masked_summation --max_epochs cpu --models slstm --lengths 400 --seeds 1,2 \
        --out_dir "$W/d1"
    queue 2 masked_summation --max_epochs cpu --models transformer --lengths 800 --seeds 0 \
        --out_dir "$W/d2"
    queue 4 masked_summation --max_epochs cpu --models ran,slstm --lengths 800 --seeds 0 \
        --out_dir "$W/d4"
    # Opt-in (QUEUES="5 6 7"): the ListOps curriculum chain (8,000 steps on 8-64 tokens, 2,000
    # on 32-200, then the size's run; docs/reproduction.md section 2) at the LRA sizes for
    # RAN (queue 5), and at the reduced budget the cells the CPU has not trained (6 Dec):
    # the S-LSTM's seeds 1-2 (queue 6) and the Transformer's seeds 1-2 (queue 7; both seed
    # 0s and the Star-Transformer's three seeds ran on the CPU). Each phase is its own run
    # folder: a cut chain comes back in unfinished.tgz and resumes from the phase it reached.
    chain="--curriculum_steps 8000 --curriculum_mid_steps 2000 --checkpoints_per_eval 5"
    if [ -n "${TINY:-}" ]; then chain="--curriculum_steps 4 --curriculum_mid_steps 2"; fi
    # shellcheck disable=SC2086  # chain is a list of flags.
    queue 5 listops_study --full --models ran --seeds 0 $chain --out "$W/listops_q5.json"
    # shellcheck disable=SC2086
    queue 6 listops_study --models slstm --seeds 1,2 $chain --out "$W/listops_q6.json"
    # shellcheck disable=SC2086
    queue 7 listops_study --models transformer --seeds 1,2 $chain --out "$W/listops_q7.json"
    # shellcheck disable=SC2086  # QPIDS is a list.
    wait $QPIDS
    echo "queues done at $SECONDS s"
    touch "$W/go"
    wait
    echo "timing done at $SECONDS s"
    collect "$W"
    grep -h '^{"model"' "$W"/logs/q*.log | cut -c1-200
    ls -la "$OUT"
    ;;
  collect)  # Again, after a cut session: WORKDIR (default /tmp/studies) into $OUT.
    collect "$STUDIES"
    ;;
  *) echo "usage: OUT=dir bash experiments/gpu_suite.sh harness|recurrent|rest|cudnn|pack|own_corpus|listops|studies|collect" >&2
     exit 2 ;;
esac
