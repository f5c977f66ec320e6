#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source, build and script file of the tree says its licence in its
# first lines (SPDX-License-Identifier: Apache-2.0), so that a file copied
# out of Loom still carries it. Usage: spdx.sh SOURCE_DIR
set -euo pipefail
src=$1
missing=0 checked=0
while IFS= read -r -d '' f; do
  checked=$((checked + 1))
  if ! head -n 3 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0'; then
    echo "FAIL ${f#"$src"/} has no SPDX-License-Identifier: Apache-2.0 in its first 3 lines"
    missing=$((missing + 1))
  fi
done < <(find "$src" \( -path "$src/.git" -o -path "$src/build*" -o -name '.*' -prune \) -prune -o -type f \
           \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cmake' -o -name '*.in' \
              -o -name 'CMakeLists.txt' -o -name '*.sh' -o -name '*.py' -o -name '*.toml' -o -name '*.map' \
              -o -name 'Makefile' \) -print0)
(( checked > 100 )) || { echo "FAIL only $checked files found under $src"; exit 1; }
(( missing == 0 )) || { echo "$missing of $checked files lack the SPDX line"; exit 1; }
echo "all $checked source files carry SPDX-License-Identifier: Apache-2.0"
