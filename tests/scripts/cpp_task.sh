#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A task compiled in C++ against the installed libloom: install the runtime,
# the SDK and the C++ API into a temporary prefix, build examples/cpp-task
# with find_package(Loom), and train it by name with `loom train` loading the
# library through [trainer] task_library.
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d /tmp/loom-cpp-task-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for component in runtime sdk cpp-dev; do
  cmake --install "$build" --prefix "$tmp/prefix" --component "$component" >/dev/null
done
[[ -f "$tmp/prefix/include/loom/train/task.hpp" ]] || { echo "FAIL loom/train/task.hpp was not installed"; exit 1; }
cmake -S "$src/examples/cpp-task" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CXX_FLAGS="-Werror" >/dev/null
cmake --build "$tmp/build" >/dev/null
lib="$tmp/build/libsine_task.so"
[[ -f "$lib" ]] || { echo "FAIL not built: $lib"; exit 1; }
out=$("$tmp/prefix/bin/loom" train "$src/examples/cpp-task/sine.toml" --set "trainer.task_library=\"$lib\"" \
        --set "trainer.output_dir=\"$tmp/run\"" 2>"$tmp/err") || { cat "$tmp/err"; echo "FAIL loom train exited $?"; exit 1; }
echo "$out"
loss=$(echo "$out" | sed -n 's/^final loss: \([0-9.e-]*\) after 300 steps$/\1/p')
[[ -n "$loss" ]] || { cat "$tmp/err"; echo "FAIL no final loss line"; exit 1; }
awk -v l="$loss" 'BEGIN { exit !(l < 0.05) }' || { echo "FAIL sine did not train: final loss $loss"; exit 1; }
# A library that is not one gets exit code 2 and the loader's reason.
set +e
"$tmp/prefix/bin/loom" train "$src/examples/cpp-task/sine.toml" --set "trainer.task_library=\"$src/README.md\"" \
  >/dev/null 2>"$tmp/err"
code=$?
set -e
[[ $code -eq 2 ]] || { cat "$tmp/err"; echo "FAIL a bad task_library exited $code, not 2"; exit 1; }
grep -q "could not be loaded" "$tmp/err" || { cat "$tmp/err"; echo "FAIL no loader reason"; exit 1; }
echo "C++ task built against the installed libloom, loaded by name and trained (final loss $loss)"
