#!/usr/bin/env bash
# The layers stack: nothing in model/ includes dataset/ or actors/, nothing in dataset/
# includes actors/, neither includes CAF, and a file of actors/ marked CAF-free (the
# words "CAF-free (tests/tools/layers.sh)" in its first 8 lines) reaches no CAF header
# through any chain of the project's own includes. Prints every arrow that runs up, as FILE:LINE, and exits 1
# when there is one.
#
#   tests/tools/layers.sh ROOT               check the tree at ROOT
#   tests/tools/layers.sh --self-test ROOT   also show that planted upward arrows are caught
#
# KNOWN lists arrows still to be removed, each as FILE:LINE:TEXT of the include. They
# are printed but do not fail the check, and one that is gone fails it, so the list only
# shrinks. It is empty: the last one (issue 17, the trainer's use of datasets) went when
# the trainer took a model::batch_source instead of a dataset.
set -uo pipefail

MARK="CAF-free (tests/tools/layers.sh)"

KNOWN=()

is_known() {
  local k
  for k in "${KNOWN[@]}"; do [ "$1" = "$k" ] && return 0; done
  return 1
}

check() {
  local root=$1 bad=0
  cd "$root" || { echo "layers: no tree at $root" >&2; return 2; }
  # 1. Direct arrows of model/ and dataset/.
  local known_seen=()
  while IFS= read -r hit; do
    if is_known "$hit"; then
      echo "layers: known, still to remove: $hit"
      known_seen+=("$hit")
      continue
    fi
    echo "layers: $hit (model/ may include neither dataset/, actors/ nor CAF)"
    bad=1
  done < <(grep -rnE '^\s*#\s*include\s*<(actortrain/(dataset|actors)/|caf/)' model 2>/dev/null)
  if [ "$root" != "${SELF_TEST_TREE:-}" ]; then
    local k s found
    for k in "${KNOWN[@]}"; do
      found=""
      for s in "${known_seen[@]}"; do [ "$s" = "$k" ] && found=1; done
      [ -n "$found" ] || { echo "layers: the known arrow $k is gone: take it off KNOWN"; bad=1; }
    done
  fi
  while IFS= read -r hit; do
    echo "layers: $hit (dataset/ may include neither actors/ nor CAF)"
    bad=1
  done < <(grep -rnE '^\s*#\s*include\s*<(actortrain/actors/|caf/)' dataset 2>/dev/null)
  # 2. CAF-free parts of actors/, through every chain of project includes.
  local f
  while IFS= read -r f; do
    local -A seen=()
    local stack=("$f")
    declare -A via=()
    via["$f"]="$f"
    while [ ${#stack[@]} -gt 0 ]; do
      local cur=${stack[-1]}
      unset 'stack[-1]'
      [ -n "${seen[$cur]:-}" ] && continue
      seen["$cur"]=1
      local line inc n=0
      while IFS= read -r line; do
        n=$((n + 1))
        if [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<caf/ ]]; then
          echo "layers: $cur:$n includes CAF, reached from CAF-free $f (${via[$cur]})"
          bad=1
        elif [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<(actortrain/[^>]+)\> ]]; then
          inc=${BASH_REMATCH[1]}
          local cand
          for cand in model/include/$inc dataset/include/$inc actors/include/$inc; do
            if [ -f "$cand" ]; then
              [ -z "${via[$cand]:-}" ] && via["$cand"]="${via[$cur]} -> $cand"
              stack+=("$cand")
            fi
          done
        elif [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
          inc=$(realpath -m --relative-to=. "$(dirname "$cur")/${BASH_REMATCH[1]}")
          if [ -f "$inc" ]; then
            [ -z "${via[$inc]:-}" ] && via["$inc"]="${via[$cur]} -> $inc"
            stack+=("$inc")
          fi
        fi
      done <"$cur"
    done
    unset seen via
  done < <(grep -rlF --include='*.hpp' --include='*.cpp' "$MARK" actors 2>/dev/null |
           while IFS= read -r x; do head -8 "$x" | grep -qF "$MARK" && echo "$x"; done)
  return $bad
}

if [ "${1:-}" = "--self-test" ]; then
  root=${2:?usage: layers.sh --self-test ROOT}
  # The tree as it is passes...
  first=$(check "$root") || { echo "$first"; echo "FAIL: the tree has upward arrows"; exit 1; }
  # ...and each planted arrow is caught, naming its file and line.
  t=$(mktemp -d)
  trap 'rm -rf "$t"' EXIT
  mkdir -p "$t/model/src" "$t/dataset/src" "$t/actors/include/actortrain/actors/core" "$t/actors/src/core"
  printf '// a model file\n#include <actortrain/dataset/dataset.hpp>\n' >"$t/model/src/up.cpp"
  printf '#include <vector>\n#include <caf/actor.hpp>\n' >"$t/dataset/src/caf.cpp"
  printf '// CAF-free (tests/tools/layers.sh): a decision\n#pragma once\n#include <actortrain/actors/core/holder.hpp>\n' \
    >"$t/actors/include/actortrain/actors/core/decision.hpp"
  printf '#pragma once\n#include "../../../../src/core/deep.hpp"\n' >"$t/actors/include/actortrain/actors/core/holder.hpp"
  printf '#pragma once\n\n#include <caf/actor.hpp>\n' >"$t/actors/src/core/deep.hpp"
  out=$(SELF_TEST_TREE="$t" check "$t")
  rc=$?
  for want in "model/src/up.cpp:2:" "dataset/src/caf.cpp:2:" "actors/src/core/deep.hpp:3 includes CAF, reached from CAF-free actors/include/actortrain/actors/core/decision.hpp"; do
    grep -qF "$want" <<<"$out" || { echo "$out"; echo "FAIL: a planted arrow was not caught: $want"; exit 1; }
  done
  [ $rc -eq 1 ] || { echo "FAIL: planted arrows exited with $rc"; exit 1; }
  [ -n "$first" ] && echo "$first"
  echo "PASS: no upward arrow in $root${KNOWN[*]:+ but the known ones}; 3 planted ones caught"
  exit 0
fi
check "${1:?usage: layers.sh ROOT | --self-test ROOT}"
