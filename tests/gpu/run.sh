#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Loom's GPU checks (issue 14), for a machine with NVIDIA GPUs, PyTorch (pip,
# with CUDA), CMake, Ninja and a C++17 compiler, but none of Debian's -dev
# packages and no network. From the repository root:
#
#   tests/gpu/run.sh [--kit DIR] [--build DIR] [--logs DIR] [--jobs N]
#
#   --kit DIR    what tests/gpu/prepare.sh made on a Debian 12 development
#                machine (default build-gpu-kit): headers, GoogleTest's sources,
#                the ucx and collab plugins (and a fallback nccl plugin) with
#                their shared libraries, the digits data
#   --build DIR  the build folder (default build-gpu)
#   --logs DIR   where every log and the summary go (default <build>/logs)
#   --jobs N     build jobs (default: nproc)
#
# It builds libloom, `loom`, the ddp strategy, the nccl plugin and the
# conformance suite against the local PyTorch's LibTorch, then checks:
#   conformance.nccl       the collective conformance suite on the nccl plugin
#   digits.single.cuda     `digits` trained on the GPU, strategy single
#   own-model.single.cuda  the own-model CNN (TorchScript, exported here) likewise
#   digits.ddp.nccl        ddp over nccl; 2 ranks on 2 GPUs, 1 rank on one
#   own-model.ddp.nccl     (NCCL refuses two ranks of one communicator on one GPU)
#   swarm.collab.cuda+cpu  a 2-peer collab swarm, one peer on the GPU, one on the CPU
# then, with the time left, two benchmarks (INFO rows, never a failure):
#   bench.nccl             loom_bench_nccl: allreduce against device-to-device copies
#   bench.own_model        bench/own_model.sh on cuda: loom against PyTorch eager
# and prints one table: check, result, seconds, key figure.
#
# Exit: 0 every check passed; 1 a check or the build failed; 2 usage, or the
# kit or a tool is missing; 3 no CUDA device here: the build and the checks a
# CPU can run passed (they stand in for the GPU ones, listed as SKIP).
#
# Environment: LOOM_GPU_DEADLINE (seconds for everything, default 470: no
# check starts that could not finish by then); LOOM_GPU_TORCH=auto|config|shim
# (how LibTorch is found: its CMake package, else tests/gpu/torch-shim);
# LOOM_GPU_NCCL=auto|carried (build the nccl plugin here when CUDA's headers
# and nvcc are found, else use the kit's); PYTHON (a python with torch).
set -euo pipefail

t0=$SECONDS
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
kit="build-gpu-kit"
build="build-gpu"
logs=
jobs=$(nproc)
while (($#)); do
  case $1 in
    --kit) kit=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h | --help) sed -n '3,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
kit=$(cd "$kit" 2>/dev/null && pwd) || { echo "run.sh: no kit folder '$kit': run tests/gpu/prepare.sh first" >&2; exit 2; }
mkdir -p "$build"
build=$(cd "$build" && pwd)
logs=${logs:-$build/logs}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
work=$build/work  # output_dirs of the runs, exported model and data
rm -rf "$work"
mkdir -p "$work"
deadline=${LOOM_GPU_DEADLINE:-470}
torch_mode=${LOOM_GPU_TORCH:-auto}
nccl_mode=${LOOM_GPU_NCCL:-auto}

# --- results and the summary --------------------------------------------------
names=() results=() times=() figures=()
record() {  # record NAME RESULT SECONDS FIGURE
  names+=("$1") results+=("$2") times+=("$3") figures+=("$4")
  printf '[%4ds] %-24s %-4s %s\n' $((SECONDS - t0)) "$1" "$2" "$4"
}
summary_done=0
summary() {
  ((summary_done)) && return
  summary_done=1
  {
    echo
    echo "Loom GPU checks ($(hostname), $(date -u +%FT%TZ), $((SECONDS - t0)) s in all)"
    printf '%-24s %-6s %6s  %s\n' CHECK RESULT TIME 'KEY FIGURE'
    local i
    for i in "${!names[@]}"; do
      printf '%-24s %-6s %5ss  %s\n' "${names[i]}" "${results[i]}" "${times[i]}" "${figures[i]}"
    done
  } | tee "$logs/summary.txt"
  for i in "${!names[@]}"; do
    printf '%s\t%s\t%s\t%s\n' "${names[i]}" "${results[i]}" "${times[i]}" "${figures[i]}"
  done > "$logs/summary.tsv"
}

# Every process a check starts is ended: the checks run in the foreground under
# timeout; the swarm's peers run in process groups of their own (setsid),
# killed whole here.
pids=()
stop_group() { kill -"$1" -- "-$2" 2>/dev/null || kill -"$1" "$2" 2>/dev/null || true; }  # SIGNAL PID
cleanup() {
  local rc=$? p
  for p in "${pids[@]}"; do stop_group KILL "$p"; done
  if ((rc != 0 && rc != 3 && ${#names[@]} == 0)); then record run.sh FAIL 0 "stopped early (exit $rc): see the output above"; fi
  summary
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The one line of a log that says best why a run failed.
why() {
  local line
  line=$(grep -aE 'error|Error|ERROR|failed|FAILED|cannot|refus|unavailable|not found|Aborted|Segmentation|exit [0-9]' "$1" |
         grep -avE '^\[ *(RUN|OK) ' | head -1 || true)
  [[ -n $line ]] || line=$(tail -n 1 "$1" 2>/dev/null || true)
  line=${line//$'\t'/ }
  echo "${line:0:110}"
}
time_left() { echo $((deadline - (SECONDS - t0))); }

# --- the machine --------------------------------------------------------------
python=${PYTHON:-}
if [[ -z $python ]]; then
  for candidate in python3 /usr/bin/python3 python; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import torch' 2>/dev/null; then python=$candidate; break; fi
  done
fi
[[ -n $python ]] || { echo "run.sh: no python with torch found (set PYTHON)" >&2; exit 2; }
for tool in cmake ninja timeout; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing" >&2; exit 2; }
done
cxx=${CXX:-$(command -v c++ || command -v g++ || command -v clang++ || true)}
[[ -n $cxx ]] || { echo "run.sh: no C++ compiler (c++, g++, clang++; or set CXX)" >&2; exit 2; }
for f in include/spdlog/spdlog.h cmake/Boost/BoostConfig.cmake src/googletest/CMakeLists.txt data/digits.csv.gz; do
  [[ -e $kit/$f ]] || { echo "run.sh: the kit lacks $f: run tests/gpu/prepare.sh again" >&2; exit 2; }
done

# torch's folder, ABI, CMake prefix and CUDA view, in one Python start.
"$python" - > "$logs/torch.txt" 2>&1 <<'EOF' || true
import os, torch, torch.utils
print("torch_root=" + os.path.dirname(torch.__file__))
print("cmake_prefix=" + torch.utils.cmake_prefix_path)
print("cxx11_abi=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
print("version=" + torch.__version__)
print("cuda=" + str(torch.version.cuda))
try:
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
except Exception as e:  # a driver problem is "no device" here, said in the log
    print("cuda_error=" + str(e).replace("\n", " "))
    n = 0
print("devices=%d" % n)
for i in range(n):
    print("device%d=%s" % (i, torch.cuda.get_device_name(i)))
EOF
tv() { sed -n "s/^$1=//p" "$logs/torch.txt" | head -1; }
torch_root=$(tv torch_root)
[[ -n $torch_root ]] || { cat "$logs/torch.txt" >&2; echo "run.sh: $python cannot describe its torch" >&2; exit 2; }
ngpu=$(tv devices)
ngpu=${ngpu:-0}
site=$(dirname "$torch_root")
{
  echo "python: $python ($("$python" --version 2>&1)); torch $(tv version), CUDA $(tv cuda), $ngpu device(s) $(tv device0)"
  echo "compiler: $("$cxx" --version | head -1); cmake: $(cmake --version | head -1); glibc: $(ldd --version 2>&1 | head -1)"
  echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi -L 2>&1 || echo "nvidia-smi: not here"
  echo "kit:"; head -3 "$kit/MANIFEST.txt" 2>/dev/null | sed 's/^/  /' || true
} | tee "$logs/machine.txt"
ranks=1
((ngpu >= 2)) && ranks=2
# One rank runs without `loom launch`: a job of one needs no store (its
# out-of-band exchange is a copy). Launch's own store server speaks the c10d
# protocol of the LibTorch it is built with (checked against 1.13 and 2.6,
# not yet against pip torch 2.11's client): 2 GPUs depend on it.
launched() {  # launched TIMEOUT CMD...: CMD under loom launch -n $ranks, or alone for 1 rank
  local limit=$1
  shift
  if ((ranks > 1)); then "$loom" launch -n "$ranks" --timeout "$limit" -- "$@"; else "$@"; fi
}

# --- CUDA toolkit and NCCL, for building the nccl plugin here ----------------
# pip's layout first (nvidia/cu13, nvidia/nccl), then CUDA_HOME and /usr/local/cuda.
nvcc=
for candidate in "${CUDA_HOME:-/nonexistent}/bin/nvcc" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc \
                 "$site"/nvidia/cu*/bin/nvcc "$site"/nvidia/cuda_nvcc/bin/nvcc; do
  [[ -n $candidate && -x $candidate ]] && { nvcc=$candidate; break; }
done
cuda_root=
[[ -n $nvcc ]] && cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
nccl_h="" nccl_lib=""
for dir in "${NCCL_ROOT:-/nonexistent}" "$site/nvidia/nccl" ${cuda_root:+"$cuda_root"} /usr/local/cuda /usr; do
  [[ -z $nccl_h && -f $dir/include/nccl.h ]] && nccl_h=$dir/include
  for lib in "$dir"/lib/libnccl.so "$dir"/lib/libnccl.so.2 "$dir"/lib64/libnccl.so.2 "$dir"/lib/x86_64-linux-gnu/libnccl.so.2; do
    [[ -z $nccl_lib && -f $lib ]] && nccl_lib=$lib
  done
done
# Where the process finds libcudart/libnccl for a carried plugin (torch's own
# RUNPATH finds them for libtorch; these make the plugin's dlopen safe too).
cuda_lib_path=
for dir in "$site"/nvidia/cu*/lib "$site"/nvidia/cuda_runtime/lib "$site"/nvidia/nccl/lib; do
  [[ -d $dir ]] && cuda_lib_path+=${cuda_lib_path:+:}$dir
done
# zlib: the kit's headers, the machine's libz.so.1 (Python itself needs it).
zlib=$( (ldconfig -p 2>/dev/null || true) | awk '$1 == "libz.so.1" && /x86-64/ {print $NF; exit}')
if [[ -z $zlib ]]; then
  for f in /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 /usr/lib64/libz.so.1 /lib64/libz.so.1 /usr/lib/libz.so.1; do
    [[ -f $f ]] && { zlib=$f; break; }
  done
fi

# --- build ----------------------------------------------------------------------
build_start=$SECONDS
abi=$(tv cxx11_abi)
abi=${abi:-1}
build_log=$logs/build.log
: > "$build_log"
build_ok=1
nccl_source=none
# GoogleTest from the kit's sources, with torch's libstdc++ ABI.
gtest_prefix=$build/googletest-install
if ! { cmake -S "$kit/src/googletest" -B "$build/googletest" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
         -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$gtest_prefix" -DCMAKE_INSTALL_LIBDIR=lib \
         -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" &&
       cmake --build "$build/googletest" -j "$jobs" && cmake --install "$build/googletest"; } >> "$build_log" 2>&1; then
  build_ok=0
  record build FAIL $((SECONDS - build_start)) "GoogleTest: $(why "$build_log")"
fi

plugins="ddp_strategy;nccl_collective"
[[ $nccl_mode == carried ]] && plugins=ddp_strategy
common_args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_BUILD_BENCH=OFF -DLOOM_BUILD_TESTS=ON
  "-DLOOM_PLUGINS=$plugins"
  "-DCMAKE_PREFIX_PATH=$(tv cmake_prefix)"
  "-Dspdlog_DIR=$kit/cmake/spdlog" "-Dnlohmann_json_DIR=$kit/cmake/nlohmann_json" "-DCLI11_DIR=$kit/cmake/CLI11"
  "-Dtomlplusplus_DIR=$kit/cmake/tomlplusplus" "-DBoost_DIR=$kit/cmake/Boost" -DBoost_NO_SYSTEM_PATHS=ON
  "-DGTest_DIR=$gtest_prefix/lib/cmake/GTest" "-DZLIB_INCLUDE_DIR=$kit/include" "-DZLIB_LIBRARY=$zlib")
# pip's libnccl.so.2 has no libnccl.so beside it, which find_library needs: name the files.
if [[ -n $cuda_root ]]; then
  common_args+=("-DCUDAToolkit_ROOT=$cuda_root" "-DCUDA_TOOLKIT_ROOT_DIR=$cuda_root")
  [[ -n $nccl_h ]] && common_args+=("-DLOOM_NCCL_INCLUDE_DIR=$nccl_h")
  [[ -n $nccl_lib ]] && common_args+=("-DLOOM_NCCL_LIBRARY=$nccl_lib")
fi
shim_args=("-DTorch_DIR=$root/tests/gpu/torch-shim" "-DLOOM_TORCH_ROOT=$torch_root" "-DLOOM_TORCH_CXX11_ABI=$abi")
# The SDK's headers include <dlpack/dlpack.h> from the system, and nothing
# names the folder; CPATH puts the kit's headers where the system's would be
# (after every -I), for GCC and Clang alike.
export CPATH=$kit/include${CPATH:+:$CPATH}
configure() {  # configure MODE: config (LibTorch's CMake package) or shim
  # An earlier run's build is reused (a warm machine keeps build-gpu/), unless
  # it found LibTorch the other way.
  if [[ $(cat "$build/loom/.torch-mode" 2>/dev/null) != "$1" ]]; then rm -rf "$build/loom"; fi
  mkdir -p "$build/loom"
  echo "$1" > "$build/loom/.torch-mode"
  local extra=()
  [[ $1 == shim ]] && extra=("${shim_args[@]}")
  echo "== configure ($1)" >> "$build_log"
  cmake -S "$root" -B "$build/loom" "${common_args[@]}" "${extra[@]}" >> "$build_log" 2>&1 || {
    rm -f "$build/loom/.torch-mode"
    return 1
  }
}
torch_used=
if ((build_ok)); then
  if [[ $torch_mode != shim ]] && configure config; then
    torch_used=config
  elif [[ $torch_mode != config ]] && configure shim; then
    torch_used=shim
  else
    build_ok=0
    record build FAIL $((SECONDS - build_start)) "configure: $(grep -a -A2 'CMake Error' "$build_log" | tail -3 | tr '\n' ' ' | cut -c1-110)"
  fi
fi
if ((build_ok)); then
  targets=(loom loom_conformance ddp_strategy)
  echo "== build ${targets[*]}" >> "$build_log"
  built=1
  cmake --build "$build/loom" --target "${targets[@]}" -j "$jobs" >> "$build_log" 2>&1 || built=0
  # A LibTorch CMake package that configured but names CUDA libraries this
  # machine lacks fails only at the link: try once more with the shim.
  if ((!built)) && [[ $torch_used == config && $torch_mode == auto ]] &&
     grep -aqE 'cannot find -l|No rule to make target .*\.so|ld returned' "$build_log"; then
    echo "run.sh: linking against LibTorch's CMake package failed; trying tests/gpu/torch-shim" | tee -a "$build_log"
    if configure shim; then
      torch_used=shim
      built=1
      cmake --build "$build/loom" --target "${targets[@]}" -j "$jobs" >> "$build_log" 2>&1 || built=0
    fi
  fi
  if ((!built)); then
    build_ok=0
    msg=$(grep -a -m1 -E ': (fatal )?error|undefined reference|cannot find -l' "$build_log" || tail -n 1 "$build_log")
    record build FAIL $((SECONDS - build_start)) "compile: ${msg:0:100}"
  fi
fi
# The nccl plugin on its own: should it not build here, the kit's is used.
if ((build_ok)) && grep -q "nccl collective plugin: NCCL" "$build_log"; then
  echo "== build nccl_collective" >> "$build_log"
  if cmake --build "$build/loom" --target nccl_collective -j "$jobs" >> "$build_log" 2>&1; then
    nccl_source=built
  else
    echo "run.sh: building the nccl plugin here failed; the kit's is used" | tee -a "$build_log"
  fi
fi
if ((build_ok)); then
  plugin_path=$kit/plugins
  if [[ $nccl_source == none && -f $kit/plugins-nccl/libnccl_collective.so ]]; then
    plugin_path+=:$kit/plugins-nccl
    nccl_source="carried (prebuilt)"
  fi
  libloom=$(ls "$build"/loom/lib/libloom.so* | head -1)
  cuda_linked=no
  command -v readelf >/dev/null && readelf -d "$libloom" | grep -q 'libtorch_cuda' && cuda_linked=yes
  record build PASS $((SECONDS - build_start)) \
    "torch $(tv version) via $torch_used; nccl plugin $nccl_source; libloom needs libtorch_cuda: $cuda_linked"
  if [[ $(tv cuda) != None && $cuda_linked == no ]]; then
    echo "run.sh: warning: libloom does not link libtorch_cuda: loom may not see the GPU" | tee -a "$build_log"
  fi
else
  for c in conformance.nccl digits.single.cuda own-model.single.cuda digits.ddp.nccl own-model.ddp.nccl \
           swarm.collab.cuda+cpu; do
    record "$c" "NOTRUN" 0 "the build failed: $build_log"
  done
  exit 1
fi

loom=$build/loom/bin/loom
conformance=$build/loom/bin/loom_conformance
# What every loom process gets: the kit's plugins and the libraries they need.
loom_env=("LOOM_PLUGIN_PATH=$plugin_path" "UCX_MODULE_DIR=$kit/lib/ucx"
  "LD_LIBRARY_PATH=$kit/lib${cuda_lib_path:+:$cuda_lib_path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
lenv() { env "${loom_env[@]}" "$@"; }

lenv "$loom" plugins > "$logs/plugins.txt" 2>&1 || true
cat "$logs/plugins.txt"
plugin_status() { awk -v n="$1" '$1 == n {for (i = 6; i <= NF; i++) printf "%s%s", $i, (i < NF ? " " : ""); exit}' "$logs/plugins.txt"; }

# run_check NAME SECONDS LOG CMD...: CMD under timeout, output into LOG;
# sets rc and took. A check that could not finish before the deadline is not started.
rc=0 took=0
run_check() {
  local name=$1 limit=$2 log=$3
  shift 3
  if (($(time_left) < limit / 3)); then
    rc=124 took=0
    echo "not started: $(time_left) s left of LOOM_GPU_DEADLINE=$deadline" > "$log"
    return
  fi
  ((limit > $(time_left))) && limit=$(time_left)
  local start=$SECONDS
  echo "== $name: $*" > "$log"
  rc=0
  timeout -k 10 "$limit" "$@" >> "$log" 2>&1 || rc=$?
  took=$((SECONDS - start))
}
# judge NAME LOG EXPECT_DEVICE: PASS when rc is 0, the run said it trained
# on the device (for cuda) and printed its final accuracy.
accuracy() { grep -ao 'final accuracy: [0-9.]*' "$1" | awk '{print $3}' | paste -sd/ -; }
judge() {
  local name=$1 log=$2 device=$3 acc
  acc=$(accuracy "$log")
  if ((rc == 124 || rc == 137)); then
    record "$name" FAIL "$took" "timed out ($(why "$log"))"
  elif ((rc != 0)); then
    record "$name" FAIL "$took" "exit $rc: $(why "$log")"
  elif [[ $device == cuda ]] && ! grep -aq 'training on cuda' "$log"; then
    record "$name" FAIL "$took" "exit 0 but no 'training on cuda' line"
  elif [[ -z $acc ]]; then
    record "$name" FAIL "$took" "exit 0 but no final accuracy"
  else
    record "$name" PASS "$took" "final accuracy $acc"
  fi
}
no_gpu_reason="no CUDA device ($(tv cuda_error || true))"
no_gpu_reason=${no_gpu_reason/ ()/}

digits=(--set "task.path=$kit/data/digits.csv.gz")
own=(--set "task.module=$work/own/digits_cnn.pt" --set "task.train=$work/own/digits_train.pt"
     --set "task.validation=$work/own/digits_val.pt")
port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- 1. the conformance suite on nccl ------------------------------------------
log=$logs/conformance.nccl.log
suite_args=(--plugin nccl --timeout-ms 20000)
# A device-memory mode, should the suite have one by the time this runs.
"$conformance" --help 2>&1 | grep -q -- '--device' && suite_args+=(--device cuda)
if ((ngpu == 0)); then
  run_check conformance.nccl 120 "$log" env "${loom_env[@]}" "$conformance" "${suite_args[@]}"
  record conformance.nccl SKIP "$took" "$no_gpu_reason; suite exit $rc: $(why "$log")"
else
  run_check conformance.nccl 240 "$log" env "${loom_env[@]}" bash -c "$(declare -f launched); loom=\"\$1\" ranks=\$2; shift 2; launched 230 \"\$@\"" \
    _ "$loom" "$ranks" "$conformance" "${suite_args[@]}"
  counts=$(grep -aoE '\[ *(PASSED|SKIPPED|FAILED) *\] [0-9]+ tests?' "$log" | sed -E 's/\[ *([A-Z]+) *\] ([0-9]+).*/\2 \L\1/' |
           paste -sd, - || true)
  if ((rc == 0)); then
    record conformance.nccl PASS "$took" "np $ranks: ${counts:-no counts}"
  else
    record conformance.nccl FAIL "$took" "np $ranks, exit $rc: ${counts:+$counts; }$(why "$log")"
  fi
fi

# --- 2. single-process training ------------------------------------------------
log=$logs/export.log
"$python" tests/gpu/export_digits.py "$kit/data/digits.csv.gz" "$work/own" > "$log" 2>&1 || {
  echo "run.sh: exporting the own-model CNN failed:"; cat "$log"; }
single() {  # single NAME DEVICE CONFIG ARGS...
  local name=$1 device=$2 config=$3
  shift 3
  log=$logs/$name.log
  run_check "$name" 150 "$log" env "${loom_env[@]}" "$loom" train "$config" --set "trainer.device=$device" \
    --set "trainer.output_dir=$work/$name" "$@"
  judge "$name" "$log" "$device"
}
if ((ngpu > 0)); then
  single digits.single.cuda cuda examples/configs/digits.toml "${digits[@]}"
  single own-model.single.cuda cuda examples/own-model/digits-single.toml "${own[@]}"
else
  record digits.single.cuda SKIP 0 "$no_gpu_reason"
  record own-model.single.cuda SKIP 0 "$no_gpu_reason"
  single digits.single.cpu cpu examples/configs/digits.toml "${digits[@]}"
  single own-model.single.cpu cpu examples/own-model/digits-single.toml "${own[@]}"
fi

# --- 3. ddp over nccl -----------------------------------------------------------
ddp() {  # ddp NAME COLLECTIVE DEVICE CONFIG ARGS...
  local name=$1 collective=$2 device=$3 config=$4
  shift 4
  log=$logs/$name.log
  run_check "$name" 180 "$log" env "${loom_env[@]}" bash -c "$(declare -f launched); loom=\"\$1\" ranks=\$2; shift 2; launched 170 \"\$@\"" \
    _ "$loom" "$ranks" "$loom" train "$config" --set "collective.name=$collective" --set "trainer.device=$device" \
    --set "trainer.output_dir=$work/$name" "$@"
  judge "$name" "$log" "$device"
  if ((ranks == 1)) && [[ ${results[-1]} == PASS ]]; then
    figures[-1]+=" (1 rank: one GPU here, NCCL refuses two ranks on one device)"
  fi
}
if ((ngpu > 0)); then
  ddp digits.ddp.nccl nccl cuda examples/configs/digits-ddp.toml "${digits[@]}"
  ddp own-model.ddp.nccl nccl cuda examples/own-model/digits-ddp.toml "${own[@]}"
else
  record digits.ddp.nccl SKIP 0 "$no_gpu_reason; nccl plugin: $(plugin_status nccl)"
  record own-model.ddp.nccl SKIP 0 "$no_gpu_reason"
  ranks=2  # the CPU stand-in: ddp over the kit's ucx plugin, 2 ranks
  ddp digits.ddp.ucx.cpu ucx cpu examples/configs/digits-ddp.toml "${digits[@]}"
  ranks=1
fi

# --- 4. a collab swarm: one peer on the GPU, one on the CPU ---------------------
setsid=$(command -v setsid || true)
swarm() {  # swarm NAME DEVICE1 DEVICE2: two peers of one run on loopback
  local name=$1 d1=$2 d2=$3 p run limit=200 start=$SECONDS
  log=$logs/$name.log
  if (($(time_left) < 60)); then
    record "$name" FAIL 0 "not started: $(time_left) s left of LOOM_GPU_DEADLINE=$deadline"
    return
  fi
  ((limit > $(time_left))) && limit=$(time_left)
  p=$(port)
  run="gpu-check-$p"
  local common=(examples/configs/digits-collab.toml "${digits[@]}" --set strategy.options.listen=127.0.0.1
                --set "strategy.options.run_id=$run" --set strategy.options.min_peers=2 --set trainer.max_steps=30)
  $setsid env "${loom_env[@]}" timeout -k 5 "$limit" "$loom" train "${common[@]}" --set "strategy.options.port=$p" \
    --set "trainer.device=$d1" --set "trainer.output_dir=$work/$name/peer1" > "$log.peer1" 2>&1 &
  local a=$!
  pids+=("$a")
  $setsid env "${loom_env[@]}" LOOM_INITIAL_PEERS="127.0.0.1:$p" timeout -k 5 "$limit" "$loom" train "${common[@]}" \
    --set "trainer.device=$d2" --set "trainer.output_dir=$work/$name/peer2" > "$log.peer2" 2>&1 &
  local b=$!
  pids+=("$b")
  # A peer that failed leaves the other waiting for min_peers until its
  # timeout: stop the other 15 s after a failure.
  local rc1="" rc2="" failed_at=""
  while [[ -z $rc1 || -z $rc2 ]]; do
    if [[ -z $rc1 ]] && ! kill -0 "$a" 2>/dev/null; then rc1=0; wait "$a" || rc1=$?; fi
    if [[ -z $rc2 ]] && ! kill -0 "$b" 2>/dev/null; then rc2=0; wait "$b" || rc2=$?; fi
    if [[ -z $failed_at && (${rc1:-0} != 0 || ${rc2:-0} != 0) ]]; then failed_at=$SECONDS; fi
    if [[ -n $failed_at ]] && ((SECONDS - failed_at > 15)); then
      [[ -n $rc1 ]] || stop_group TERM "$a"
      [[ -n $rc2 ]] || stop_group TERM "$b"
    fi
    sleep 0.5
  done
  took=$((SECONDS - start))
  { echo "== peer1 ($d1), exit $rc1"; cat "$log.peer1"; echo "== peer2 ($d2), exit $rc2"; cat "$log.peer2"; } > "$log"
  rm -f "$log.peer1" "$log.peer2"
  local acc
  acc=$(accuracy "$log")
  if ((rc1 != 0 || rc2 != 0)); then
    record "$name" FAIL "$took" "exit $rc1/$rc2: $(why "$log")"
  elif [[ $d1 == cuda ]] && ! grep -aq 'training on cuda' "$log"; then
    record "$name" FAIL "$took" "exit 0 but no 'training on cuda' line"
  elif ! grep -aq '| 2 peers' "$log"; then
    record "$name" FAIL "$took" "the peers never trained as 2 peers (accuracy $acc)"
  else
    record "$name" PASS "$took" "final accuracy $d1 $acc $d2 (2 peers)"
  fi
}
if ((ngpu > 0)); then
  swarm swarm.collab.cuda+cpu cuda cpu
else
  record swarm.collab.cuda+cpu SKIP 0 "$no_gpu_reason"
  swarm swarm.collab.cpu+cpu cpu cpu
fi

# --- benchmarks (issue 14), with the time left; they never fail the run -----------
# The nccl allreduce sweep against device-to-device copies, and steps per
# second of the own-model CNN and TinyGPT, loom against PyTorch eager.
if ((ngpu > 0 && ${built:-0})) && (($(time_left) > 90)); then
  log=$logs/bench.nccl.log
  start=$SECONDS
  if cmake --build "$build/loom" --target loom_bench_nccl -j "$jobs" > "$log" 2>&1 &&
     env "${loom_env[@]}" timeout 60 "$build/loom/bin/loom_bench_nccl" --max-mib 256 --iters 10 >> "$log" 2>&1; then
    record bench.nccl INFO $((SECONDS - start)) "$(awk '$1 ~ /^[0-9]+$/ {last = $1 " B: " $3 " GB/s algbw, copy " $5 " GB/s, ar/copy " $6} END {print last}' "$log")"
  else
    record bench.nccl INFO $((SECONDS - start)) "did not run: $(why "$log")"
  fi
fi
if ((ngpu > 0 && ${built:-0})) && (($(time_left) > 150)); then
  log=$logs/bench.own_model.log
  start=$SECONDS
  if env "${loom_env[@]}" DEVICE=cuda PYTHON="$python" STEPS=100 REPEAT=1 \
       timeout $(($(time_left) - 20)) bash bench/own_model.sh "$build/loom" > "$log" 2>&1; then
    record bench.own_model INFO $((SECONDS - start)) "$(awk '($1 == "digits" || $1 == "gpt") && !seen[$1]++ {printf "%s loom/eager %s (wall); ", $1, $7}' "$log" | head -c 100)"
  else
    record bench.own_model INFO $((SECONDS - start)) "did not run: $(why "$log")"
  fi
fi

# --- the verdict -------------------------------------------------------------------
failed=0
for r in "${results[@]}"; do [[ $r == FAIL || $r == NOTRUN ]] && failed=1; done
if ((failed)); then
  exit 1
elif ((ngpu == 0)); then
  summary
  echo "run.sh: no CUDA device here: built, and the CPU checks passed; the GPU checks were skipped (exit 3)"
  exit 3
fi
exit 0
