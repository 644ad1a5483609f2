#!/usr/bin/env bash
# The one-shot GPU check (docs/NCCL.md). On a machine with NVIDIA GPUs and a Python with PyTorch:
#   1. builds ddp in build-gpu against that PyTorch's LibTorch (CUDA tensors on, ddp's private
#      Gloo) and PyTorch's NCCL, with what a bundle made here carries (below),
#   2. runs the GPU tests (`ctest -L gpu`: the nccl backend, tensor collectives, DDP and
#      SyncBatchNorm on CUDA, device-keyed groups, several ranks on one GPU through gloo; the
#      multi-GPU tests run when there are 2+ GPUs),
#   3. trains the main job for 3 epochs on the GPUs under ddprun (--nproc_per_node=gpu, the default
#      backend cpu:gloo,cuda:nccl), beside its PyTorch twin (bench/torch_fashion_mnist.py),
#   4. times a DDP training step (ResNet-50, batch 32) at world size 1 with and without DDP,
#      beside PyTorch's own DDP on the same GPU, and writes one step's GPU timeline (a Chrome
#      trace, summarized by bench/gpu_trace_summary.py: what each stream ran, what overlapped),
# and prints one table last. It needs no network, finishes within 8 minutes on one GPU (every
# phase is time-boxed against one deadline), and writes everything it prints to a log (and, when
# $OUT is set, copies the log and the test output there).
#
#   scripts/gpu_check.sh --bundle DIR    # here: gather what a bare GPU machine lacks into DIR (<= 48 MiB)
#   scripts/gpu_check.sh                 # there: finds the bundle in ./gpu-bundle (or $GPU_BUNDLE)
#   PYTHON=/path/to/python3 GPU_CHECK_BUDGET=420 scripts/gpu_check.sh
#   GPU_CHECK_REHEARSAL=1 scripts/gpu_check.sh   # without a GPU: every phase up to the first that needs one
#
# A bare GPU machine (Ubuntu 24.04 with a CUDA PyTorch in its python3, the CUDA toolkit, CMake and
# ninja) lacks GoogleTest, libzip's headers, the data set and Gloo's source: the bundle carries
# them (Debian's googletest source, libzip's headers and library, zlib's headers, Fashion-MNIST's
# four files, Gloo's source from scripts/private_gloo.sh).
#
# Exit status: 0 all good; 1 a phase failed (the table says which); 2 no GPU or nothing to build with.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

# ---- --bundle DIR: run on a machine with ddp's set-up (Debian 12), before the GPU machine
if [ "${1:-}" = --bundle ]; then
  dir="${2:?--bundle needs a folder}"
  set -e
  scripts/install_packages.sh googletest libzip-dev zlib1g-dev dataset-fashion-mnist xz-utils
  gloo="$(scripts/private_gloo.sh | tail -n 1)"
  rm -rf "$dir"
  mkdir -p "$dir/libzip/include" "$dir/libzip/lib" "$dir/zlib/include" "$dir/fashion-mnist"
  cp -r "$gloo" "$dir/gloo"
  cp -r /usr/src/googletest "$dir/googletest"
  cp /usr/include/zip.h /usr/include/zipconf.h "$dir/libzip/include/"
  cp -P /usr/lib/x86_64-linux-gnu/libzip.so* "$dir/libzip/lib/"
  cp /usr/include/zlib.h /usr/include/zconf.h "$dir/zlib/include/"
  cp /usr/share/datasets/fashion-mnist/*.gz "$dir/fashion-mnist/"
  {
    echo "ddp GPU bundle, made $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "gloo: $(basename "$gloo") (Debian's source package); googletest: Debian's $(dpkg-query -W -f='${Version}' googletest)"
    echo "libzip: Debian's $(dpkg-query -W -f='${Version}' libzip-dev); fashion-mnist: Debian's dataset-fashion-mnist"
  } >"$dir/MANIFEST"
  size=$(du -sm "$dir" | cut -f1)
  ((size <= 48)) || { echo "gpu_check: the bundle is $size MiB, over 48 MiB" >&2; exit 1; }
  echo "gpu_check: bundle in $dir, $size MiB: $(ls "$dir" | tr '\n' ' ')"
  exit 0
fi
REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
GEN=(-G Ninja)
command -v ninja >/dev/null 2>&1 || GEN=()
BUNDLE=${GPU_BUNDLE:-gpu-bundle}
[ -d "$BUNDLE" ] || BUNDLE=""
BUILD=${GPU_CHECK_BUILD:-build-gpu}
BUDGET=${GPU_CHECK_BUDGET:-450}  # seconds for everything
START=$(date +%s)
mkdir -p "$BUILD"
LOG=${GPU_CHECK_LOG:-$BUILD/gpu_check.log}
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

say() { printf '== %s (%ds)\n' "$*" $(($(date +%s) - START)); }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# Seconds for a phase: at most $1, and never past the deadline minus $2 held back for later phases.
slot() {
  local want=$1 reserve=${2:-0} rest
  rest=$(($(left) - reserve))
  ((rest < want)) && want=$rest
  ((want < 1)) && want=1
  echo "$want"
}
declare -a TABLE=()
row() { TABLE+=("$(printf '| %-34s | %-60s |' "$1" "$2")"); }
STATUS=0
finish() {
  local r table="$BUILD/gpu_check_table.md"
  {
    echo "## ddp GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - START)) s"
    echo
    printf '| %-34s | %-60s |\n' "what" "result"
    printf '|%s|%s|\n' "$(printf -- '-%.0s' {1..36})" "$(printf -- '-%.0s' {1..62})"
    for r in "${TABLE[@]}"; do echo "$r"; done
  } >"$table"
  echo
  cat "$table"
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    sleep 0.5  # let tee write the log's last lines
    cp -f "$LOG" "$table" "$OUT/" 2>/dev/null
    for f in ctest-gpu.log configure.log build.log bench.log main-job-plain.log main-job-amp.log main-job-resume.log \
      twin-plain.log twin-amp.log trace_summary.md; do
      [ -f "$BUILD/$f" ] && tail -c 2000000 "$BUILD/$f" >"$OUT/$f"
    done
    [ -f "$BUILD/ddp_step_trace.json.gz" ] && cp -f "$BUILD/ddp_step_trace.json.gz" "$OUT/"
  fi
  exit "$STATUS"
}

# ---- 0. the machine
say "machine"
if [ "$REHEARSAL" = 1 ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: rehearsal without a GPU: every phase up to the first that needs one"
  row "GPUs" "none (rehearsal)"
  GPUS=0 GPU_NAME=none DRIVER=none DRIVER_CUDA=""
elif ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: no GPU: nvidia-smi is not installed, so this machine has no NVIDIA driver. Run this script on a GPU machine."
  row "GPU" "none (no nvidia-smi)"
  STATUS=2
  finish
fi
[ "$REHEARSAL" = 1 ] && [ "${GPUS:-}" = 0 ] || GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "$REHEARSAL" != 1 ] && [ "${GPUS:-0}" -eq 0 ]; then
  echo "gpu_check: no GPU: nvidia-smi lists no device ($(nvidia-smi -L 2>&1 | head -1))."
  row "GPU" "none (nvidia-smi lists no device)"
  STATUS=2
  finish
fi
if [ "$GPUS" -gt 0 ]; then
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  DRIVER_CUDA=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -1)
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  nvidia-smi -L
  echo "driver $DRIVER (CUDA $DRIVER_CUDA), $(nproc) CPU cores"
  row "GPUs" "$GPUS x $GPU_NAME, driver $DRIVER (CUDA $DRIVER_CUDA)"
fi
if [ -n "$BUNDLE" ]; then
  echo "bundle: $BUNDLE ($(head -n 1 "$BUNDLE/MANIFEST" 2>/dev/null))"
  row "bundle" "$BUNDLE, $(du -sm "$BUNDLE" | cut -f1) MiB"
fi

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC="$CUDA_HOME/bin/nvcc"
TOOLKIT=""
[ -x "$NVCC" ] && TOOLKIT=$("$NVCC" --version | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p')
echo "CUDA toolkit: ${TOOLKIT:-none} at $CUDA_HOME"

# ---- 1. Python and its LibTorch
PY=""
for candidate in ${PYTHON:-} python3 /usr/bin/python3 python; do
  command -v "$candidate" >/dev/null 2>&1 || continue
  if "$candidate" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1; then
    PY=$candidate
    break
  fi
  [ -z "$PY" ] && "$candidate" -c 'import torch' >/dev/null 2>&1 && PY_CPU=$candidate
done
TORCH_OK=0
if [ -n "$PY" ]; then
  eval "$("$PY" - <<'EOF'
import glob, os, shlex, torch
def out(name, value):
    print("%s=%s" % (name, shlex.quote(str(value))))
out("TORCH_VERSION", torch.__version__)
out("TORCH_CUDA", torch.version.cuda)
out("TORCH_PREFIX", torch.utils.cmake_prefix_path)
out("TORCH_ABI", int(torch._C._GLIBCXX_USE_CXX11_ABI))
out("TORCH_SEES", torch.cuda.device_count())
try:
    import nvidia
    roots = [os.path.join(p) for p in nvidia.__path__]
except Exception:
    roots = []
def find(sub, pattern):
    for r in roots:
        hits = sorted(glob.glob(os.path.join(r, sub, pattern)))
        if hits:
            return hits[0]
    return ""
out("WHEEL_NCCL_H", find("nccl/include", "nccl.h"))
out("WHEEL_NCCL_LIB", find("nccl/lib", "libnccl.so*"))
out("WHEEL_CUDART", find("cuda_runtime/lib", "libcudart.so*"))
EOF
)"
  echo "python $PY: torch $TORCH_VERSION (CUDA $TORCH_CUDA, C++11 ABI $TORCH_ABI), sees $TORCH_SEES GPU(s)"
  row "PyTorch" "$TORCH_VERSION (CUDA $TORCH_CUDA), $PY"
  TORCH_OK=1
  if [ "$TORCH_ABI" != "1" ]; then
    echo "gpu_check: this PyTorch uses the pre-C++11 std::string ABI; ddp's other C++ dependencies (GoogleTest, libzip's"
    echo "  users) use the C++11 ABI, so the LibTorch front cannot be built against it. Only the core's GPU tests will run."
    TORCH_OK=0
    row "LibTorch front" "skipped: PyTorch $TORCH_VERSION uses the old C++ ABI"
  fi
else
  echo "gpu_check: no Python with a CUDA build of PyTorch (tried ${PYTHON:+$PYTHON }python3 /usr/bin/python3 python${PY_CPU:+; $PY_CPU has a CPU-only torch})."
  echo "  Only the core's GPU tests will run; set PYTHON=/path/to/python3 to pick one."
  row "PyTorch" "no CUDA build found: LibTorch front skipped"
fi

# NCCL: PyTorch's own when it ships one (then the process has one NCCL, the one PyTorch was
# tested with), else the toolkit's. The CUDA runtime: the toolkit's, unless the driver is too
# old for it and PyTorch ships one it supports.
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DDDP_WITH_NCCL=ON -DDDP_BUILD_EXAMPLES=ON "-DCUDAToolkit_ROOT=$CUDA_HOME")
PREFIXES=""
DATA_DIR=/usr/share/datasets/fashion-mnist
if [ -n "$BUNDLE" ]; then
  # What a bare machine lacks, from the bundle: GoogleTest built once into the build folder,
  # Gloo's source (ddp's private Gloo), libzip, zlib's headers where the system has none, the data.
  GTEST_PREFIX="$PWD/$BUILD/bundle-googletest"
  if ! ls "$GTEST_PREFIX"/lib*/cmake/GTest/GTestConfig.cmake >/dev/null 2>&1; then
    say "GoogleTest from the bundle"
    { cmake -S "$BUNDLE/googletest" -B "$BUILD/bundle-googletest-build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_POSITION_INDEPENDENT_CODE=ON "-DCMAKE_INSTALL_PREFIX=$GTEST_PREFIX" &&
      cmake --build "$BUILD/bundle-googletest-build" -j "$(nproc)" && cmake --install "$BUILD/bundle-googletest-build"; } \
      >"$BUILD/googletest.log" 2>&1 || { tail -20 "$BUILD/googletest.log"; row "GoogleTest" "FAILED to build from the bundle"; STATUS=1; }
  fi
  PREFIXES=";$GTEST_PREFIX"
  CMAKE_ARGS+=("-DDDP_GLOO_SOURCE_DIR=$PWD/$BUNDLE/gloo" "-DDDP_LIBZIP_INCLUDE=$PWD/$BUNDLE/libzip/include"
    "-DDDP_LIBZIP_LIBRARY=$PWD/$BUNDLE/libzip/lib/libzip.so")
  if [ ! -f /usr/include/zlib.h ]; then
    CMAKE_ARGS+=("-DZLIB_INCLUDE_DIR=$PWD/$BUNDLE/zlib/include"
      "-DZLIB_LIBRARY=$(ls /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -n 1)")
  fi
  DATA_DIR="$PWD/$BUNDLE/fashion-mnist"
fi
[ -x "$NVCC" ] && CMAKE_ARGS+=("-DCMAKE_CUDA_COMPILER=$NVCC")
if [ -n "${WHEEL_NCCL_H:-}" ] && [ -n "${WHEEL_NCCL_LIB:-}" ]; then
  CMAKE_ARGS+=("-DNCCL_INCLUDE_DIR=$(dirname "$WHEEL_NCCL_H")" "-DNCCL_LIBRARY=$WHEEL_NCCL_LIB")
  echo "NCCL: PyTorch's, $WHEEL_NCCL_LIB"
else
  echo "NCCL: the toolkit's ($CUDA_HOME)"
fi
major() { echo "${1%%.*}"; }
if [ -n "$TOOLKIT" ] && [ -n "$DRIVER_CUDA" ] && [ "$(major "$DRIVER_CUDA")" -lt "$(major "$TOOLKIT")" ]; then
  if [ -n "${WHEEL_CUDART:-}" ]; then
    echo "the driver supports CUDA $DRIVER_CUDA, older than the toolkit's $TOOLKIT: linking PyTorch's CUDA runtime $WHEEL_CUDART"
    CMAKE_ARGS+=("-DDDP_CUDART_LIBRARY=$WHEEL_CUDART")
  else
    echo "gpu_check: warning: the driver supports CUDA $DRIVER_CUDA, older than the toolkit's $TOOLKIT, and PyTorch ships no CUDA runtime to use instead"
  fi
fi
# LibTorch's CMake files enable CUDA and look for the toolkit themselves.
TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # rehearsal: no GPU to ask
export CUDACXX=${CUDACXX:-$NVCC} CUDA_HOME PATH="$CUDA_HOME/bin:$PATH"
CMAKE_ARGS+=("-DCUDA_TOOLKIT_ROOT_DIR=$CUDA_HOME")

# ---- 2. configure and build
configure() {  # $1: with torch (1/0)
  local args=("${CMAKE_ARGS[@]}")
  if [ "$1" = 1 ]; then
    args+=(-DDDP_BUILD_TORCH=ON "-DCMAKE_PREFIX_PATH=$TORCH_PREFIX$PREFIXES")
  else
    args+=(-DDDP_BUILD_TORCH=OFF -DDDP_BUILD_BENCH=OFF "-DCMAKE_PREFIX_PATH=${PREFIXES#;}")
  fi
  rm -f "$BUILD/CMakeCache.txt"
  timeout "$(slot 150 240)" cmake -S . -B "$BUILD" "${GEN[@]}" "${args[@]}" >"$BUILD/configure.log" 2>&1
}
say "configure (${BUILD})"
WITH_TORCH=$TORCH_OK
if [ "$WITH_TORCH" = 1 ] && ! configure 1; then
  tail -25 "$BUILD/configure.log"
  echo "gpu_check: configuring against PyTorch's LibTorch failed (above); building the core's GPU tests only."
  row "configure with LibTorch" "FAILED (see $BUILD/configure.log); core only"
  STATUS=1
  WITH_TORCH=0
fi
if [ "$WITH_TORCH" = 0 ] && ! configure 0; then
  tail -25 "$BUILD/configure.log"
  row "configure" "FAILED (see $BUILD/configure.log)"
  STATUS=1
  finish
fi
grep -E "ddp:" "$BUILD/configure.log"
if ! grep -q "ddp: nccl backend ON" "$BUILD/configure.log"; then
  row "configure" "FAILED: no nccl backend (CUDA with NCCL not found)"
  STATUS=1
  finish
fi
TARGETS=(ddp_gpu_tests)
if [ "$WITH_TORCH" = 1 ]; then
  if grep -q "CUDA tensors on" "$BUILD/configure.log"; then
    TARGETS+=(ddp_torch_gpu_tests ddp_step_bench ddprun train_fashion_mnist train_accelerate)
  else
    echo "gpu_check: PyTorch's LibTorch was found but without CUDA targets; no LibTorch GPU tests."
    row "LibTorch front" "no CUDA in LibTorch: torch GPU tests skipped"
    TARGETS+=(ddp_step_bench)
  fi
fi
say "build ${TARGETS[*]}"
# 330 s on the GPU machine's 16 cores; a rehearsal on a small machine may take its whole budget.
BUILD_CAP=330
[ "$REHEARSAL" = 1 ] && [ "$GPUS" = 0 ] && BUILD_CAP=$BUDGET
if ! timeout "$(slot "$BUILD_CAP" 150)" cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" >"$BUILD/build.log" 2>&1; then
  grep -E "error|Error" -A5 "$BUILD/build.log" | head -60
  tail -5 "$BUILD/build.log"
  row "build" "FAILED or timed out (see $BUILD/build.log)"
  STATUS=1
  # Test whatever did build.
fi
BUILT=""
for f in tests/ddp_gpu_tests tests/torch/ddp_torch_gpu_tests bench/ddp_step_bench src/launcher/ddprun \
  examples/train_fashion_mnist examples/train_accelerate; do
  [ -x "$BUILD/$f" ] && BUILT+="$(basename "$f") "
done
row "built" "${BUILT:-nothing}"

if [ "$REHEARSAL" = 1 ] && [ "$GPUS" = 0 ]; then  # what follows needs a GPU
  row "rehearsal" "built; the GPU tests, the main job and the benchmark need a GPU"
  finish
fi

# ---- 3. GPU tests
say "GPU tests (ctest -L gpu; $GPUS GPU(s): multi-GPU tests $([ "$GPUS" -gt 1 ] && echo run || echo skip))"
T=$(slot 240 100)
timeout "$T" ctest --test-dir "$BUILD" -L gpu -j 4 --output-on-failure --timeout 200 >"$BUILD/ctest-gpu.log" 2>&1
CTEST_RC=$?
grep -E "tests passed|tests failed|Failed|\*\*\*|Not Run|Timeout" "$BUILD/ctest-gpu.log" | tail -40
SUMMARY=$(grep -E "tests passed, .* tests failed" "$BUILD/ctest-gpu.log" | tail -1)
SKIPPED=$(grep -c '\*\*\*Skipped' "$BUILD/ctest-gpu.log" || true)
if [ "$CTEST_RC" -ne 0 ]; then
  STATUS=1
  [ "$CTEST_RC" -eq 124 ] && SUMMARY="timed out after ${T} s; ${SUMMARY}"
  row "GPU tests" "FAILED: ${SUMMARY:-ctest exit $CTEST_RC}"
  grep -E "^\s*[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)\)" "$BUILD/ctest-gpu.log" | head -12 |
    while read -r line; do row "  failed" "$line"; done
else
  TOTAL=$(grep -c ' Test  *#' "$BUILD/ctest-gpu.log" || true)
  if [ "${TOTAL:-0}" -gt 0 ] && [ "$SKIPPED" -ge "$TOTAL" ]; then
    STATUS=1  # a GPU is there, so tests that all skip could not use it
    WHY=$("$BUILD/tests/ddp_gpu_tests" --gtest_filter=NcclBackend.TakesBuffersOnItsOwnGpuOnly 2>&1 | grep -m1 "no CUDA device")
    echo "every GPU test skipped: ${WHY:-?}"
    row "GPU tests" "FAILED: all ${TOTAL} skipped although nvidia-smi lists a GPU"
    row "  why" "${WHY:-see $BUILD/ctest-gpu.log}"
  else
    row "GPU tests" "${SUMMARY:-?} (${SKIPPED} skipped)"
  fi
fi

# ---- 4. the main job on the GPUs under ddprun (the default backend, cpu:gloo,cuda:nccl), beside its
# PyTorch twin: 3 epochs, 3 epochs with --amp (float16, GradScaler), and a run stopped after 300
# steps and resumed from its checkpoint.
DDPRUN="$BUILD/src/launcher/ddprun"
TRAIN="$BUILD/examples/train_fashion_mnist"
job_seconds() { sed -n 's/.*(\([0-9.]*\) s of training).*/\1/p' "$1" | tail -n 1; }
job_accuracy() { sed -n 's/^.*done: test accuracy \([0-9.]*\)%.*/\1/p' "$1" | tail -n 1; }
if [ -x "$DDPRUN" ] && [ -x "$TRAIN" ] && [ "$(left)" -gt 120 ]; then
  say "the main job: 3 epochs on $GPUS GPU(s) under ddprun, beside its PyTorch twin"
  for variant in plain amp; do
    flags=()
    [ "$variant" = amp ] && flags=(--amp)
    log="$BUILD/main-job-$variant.log"
    rm -rf "$BUILD/main-job-$variant"
    timeout "$(slot 90 60)" "$DDPRUN" --standalone --nproc_per_node=gpu "$TRAIN" --data-dir "$DATA_DIR" \
      --checkpoint-dir "$BUILD/main-job-$variant" "${flags[@]}" >"$log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && [ -f "$BUILD/main-job-$variant/model.pt" ]; then
      row "main job${flags:+ ${flags[*]}}" "$(job_accuracy "$log")% after 3 epochs, $(job_seconds "$log") s of training"
    else
      STATUS=1
      row "main job${flags:+ ${flags[*]}}" "FAILED (exit $rc): $(grep -m1 -E "error|Error" "$log" | cut -c1-120)"
    fi
    if [ -n "$PY" ] && [ "$(left)" -gt 60 ]; then
      twin="$BUILD/twin-$variant.log"
      timeout "$(slot 90 40)" "$DDPRUN" --standalone --nproc_per_node=gpu "$PY" bench/torch_fashion_mnist.py \
        --data-dir "$DATA_DIR" "${flags[@]}" >"$twin" 2>&1
      line=$(grep -o "total_seconds [0-9.]* test_accuracy [0-9.]*" "$twin" | tail -n 1)
      row "PyTorch twin${flags:+ ${flags[*]}}" "${line:-FAILED: $(tail -n 1 "$twin" | cut -c1-100)}"
    fi
  done
  if [ "$(left)" -gt 60 ]; then  # stop after 300 steps, then resume: the same accuracy as an uninterrupted run's
    log="$BUILD/main-job-resume.log"
    rm -rf "$BUILD/main-job-resume"
    timeout "$(slot 60 30)" "$DDPRUN" --standalone --nproc_per_node=gpu "$TRAIN" --data-dir "$DATA_DIR" \
      --checkpoint-dir "$BUILD/main-job-resume" --epochs 1 --stop-after 300 >"$log" 2>&1 &&
      timeout "$(slot 60 30)" "$DDPRUN" --standalone --nproc_per_node=gpu "$TRAIN" --data-dir "$DATA_DIR" \
        --checkpoint-dir "$BUILD/main-job-resume" --epochs 1 >>"$log" 2>&1
    rc=$?
    resumed=$(grep -m1 -o "resumed from .*" "$log" | cut -c1-80)
    if [ "$rc" -eq 0 ] && [ -n "$resumed" ]; then row "stopped and resumed" "$resumed; $(job_accuracy "$log")% after 1 epoch"
    else STATUS=1; row "stopped and resumed" "FAILED (exit $rc; see $log)"; fi
  fi
else
  row "main job" "skipped ($([ -x "$TRAIN" ] && echo "out of time" || echo "train_fashion_mnist not built"))"
fi
# The Accelerator's example, the binary the CPU tests run, unchanged on the GPUs with fp16 from the launch.
ACCELERATE="$BUILD/examples/train_accelerate"
if [ -x "$DDPRUN" ] && [ -x "$ACCELERATE" ] && [ "$(left)" -gt 90 ]; then
  say "the Accelerator's example: 1 epoch on $GPUS GPU(s), --mixed_precision fp16"
  log="$BUILD/accelerate.log"
  rm -rf "$BUILD/accelerate-state" "$BUILD/accelerate-out"
  timeout "$(slot 60 30)" "$DDPRUN" --standalone --nproc_per_node=gpu --mixed_precision fp16 "$ACCELERATE" \
    --data-dir "$DATA_DIR" --epochs 1 --state-dir "$BUILD/accelerate-state" --out-dir "$BUILD/accelerate-out" >"$log" 2>&1
  rc=$?
  line=$(grep -m1 -o "training on .*" "$log" | cut -c1-60)
  if [ "$rc" -eq 0 ] && [ -f "$BUILD/accelerate-out/model.safetensors" ]; then
    row "Accelerator example" "$line; $(grep -o "test accuracy [0-9.]*%" "$log" | tail -n 1)"
  else STATUS=1; row "Accelerator example" "FAILED (exit $rc): $(grep -m1 -E "error|Error" "$log" | cut -c1-100)"; fi
fi

# ---- 5. the DDP step at world size 1, with and without DDP
BENCH="$BUILD/bench/ddp_step_bench"
if [ -x "$BENCH" ] && [ "$(left)" -gt 60 ]; then
  say "DDP step benchmark (ResNet-50, batch 32, world size 1, GPU 0)"
  PORT=$((29500 + RANDOM % 2000))
  export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT
  declare -A RUNS=()
  run_one() {  # name, command...
    local name=$1
    shift
    local out
    out=$(timeout "$(slot 60 5)" "$@" 2>>"$BUILD/bench.log" | tail -1)
    if [[ "$out" =~ ^[0-9.]+$ ]]; then RUNS[$name]+="$out "; else echo "  $name: no timing ($*)"; fi
  }
  ROUNDS=3
  for round in $(seq 1 $ROUNDS); do
    [ "$(left)" -lt 30 ] && break
    run_one "ddp: no DDP" "$BENCH" --model resnet50 --device cuda --steps 30 --no-ddp
    run_one "ddp: DDP" "$BENCH" --model resnet50 --device cuda --steps 30
    run_one "ddp: DDP + allreduce hook" "$BENCH" --model resnet50 --device cuda --steps 30 --comm-hook allreduce
    # The same with gradient_as_bucket_view: no copies in or out, so the difference to the row
    # above is what the copies cost, and what is left is the hook's averaging and the host's work.
    run_one "ddp: DDP + allreduce hook, bucket view" "$BENCH" --model resnet50 --device cuda --steps 30 \
      --comm-hook allreduce --bucket-view
    if [ -n "$PY" ] && [ "$(left)" -gt 40 ]; then
      run_one "PyTorch: no DDP" "$PY" bench/torch_ddp_step.py --model resnet50 --device cuda --steps 30 --no-ddp
      run_one "PyTorch: DDP" "$PY" bench/torch_ddp_step.py --model resnet50 --device cuda --steps 30
    fi
    echo "  round $round: $(for k in "${!RUNS[@]}"; do printf '%s=[%s] ' "$k" "${RUNS[$k]}"; done)"
  done
  median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
  for fw in ddp PyTorch; do
    base=$(echo "${RUNS["$fw: no DDP"]:-}" | median)
    [ -z "$base" ] && continue
    row "$fw step, no DDP" "$base ms (median of $(echo "${RUNS["$fw: no DDP"]}" | wc -w))"
    for variant in "DDP" "DDP + allreduce hook" "DDP + allreduce hook, bucket view"; do
      v=$(echo "${RUNS["$fw: $variant"]:-}" | median)
      [ -z "$v" ] && continue
      pct=$(awk -v a="$base" -v b="$v" 'BEGIN {printf "%+.1f", (b / a - 1) * 100}')
      verdict=$(awk -v a="$base" -v b="$v" 'BEGIN {print ((b / a - 1) * 100 <= 3.0) ? "within the 3% target" : "ABOVE the 3% target"}')
      # The target (issue 36) is the step whose buckets really travel: at world size 1 the
      # explicit all-reduce hook makes DDP fill, average and empty them (a group of one skips that
      # without a hook), as PyTorch's DDP always does.
      [ "$fw" = ddp ] && [ "$variant" = "DDP + allreduce hook" ] && [[ "$verdict" == ABOVE* ]] && STATUS=1
      row "$fw step, $variant" "$v ms: overhead $pct% ($verdict)"
    done
  done
  # One step's GPU timeline with the hook (LibTorch's profiler, a Chrome trace): which stream ran
  # the bucket copies, the averaging and the all-reduce, and how much of it overlapped backward.
  if [ "$(left)" -gt 25 ]; then
    say "a timeline of one DDP step (ResNet-50, the all-reduce hook)"
    rm -f "$BUILD/ddp_step_trace.json"
    timeout "$(slot 60 5)" "$BENCH" --model resnet50 --device cuda --steps 5 --comm-hook allreduce \
      --trace "$BUILD/ddp_step_trace.json" >>"$BUILD/bench.log" 2>&1
    if [ -s "$BUILD/ddp_step_trace.json" ] &&
      "${PY:-python3}" bench/gpu_trace_summary.py "$BUILD/ddp_step_trace.json" --markdown >"$BUILD/trace_summary.md"; then
      cat "$BUILD/trace_summary.md"
      TABLE+=("$(sed 's/^| /| timeline: /' "$BUILD/trace_summary.md")")
      gzip -kf "$BUILD/ddp_step_trace.json"
    else
      row "timeline of one step" "none (bench.log, trace_summary.md say why)"
    fi
  fi
else
  row "benchmark" "skipped ($([ -x "$BENCH" ] && echo "out of time" || echo "ddp_step_bench not built"))"
fi

finish
