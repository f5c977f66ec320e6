#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every lib<name>_<kind>.so in the given folders must export exactly its
# entry symbol, loom_<kind>_plugin_v1, and nothing else (DESIGN.md rule 1).
set -euo pipefail
checked=0 bad=0
for dir in "$@"; do
  for so in "$dir"/lib*_collective.so "$dir"/lib*_strategy.so; do
    [[ -f "$so" ]] || continue
    file=$(basename "$so" .so)
    kind=${file##*_}
    expected="loom_${kind}_plugin_v1"
    actual=$(nm -D --defined-only "$so" | awk '{print $NF}' | sort | tr '\n' ' ')
    if [[ "$actual" != "$expected " ]]; then
      echo "FAIL $so exports: ${actual:-nothing}(expected only $expected)"
      bad=$((bad + 1))
    else
      echo "ok   $so exports only $expected"
    fi
    checked=$((checked + 1))
  done
done
if [[ $checked -eq 0 ]]; then echo "FAIL no plugins found in: $*"; exit 1; fi
echo "$checked plugin(s) checked, $bad with extra or missing exports"
[[ $bad -eq 0 ]]
