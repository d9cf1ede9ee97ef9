#!/usr/bin/env bash
# The checkout the device tool sends with every call, slimmed for the carry (issue #34): every call sends the
# working tree (tracked files and untracked ones git keeps) beside its carried paths, 64 MiB in all, and the
# server on the GPU machine needs none of tests/, runs/, benchmarks/ or docs/ (52 of the tree's 56.5 MB on
# 2026-12-07). `away` moves them to DIR (not under the checkout), so that `carry build` cuts parts of some
# 58 MiB (5 server calls, 1 client call, instead of 27 and 6); `back` returns them. Nothing is committed or
# deleted: git sees the files missing while they are away, so run `back` before any commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIRS=(tests runs benchmarks docs)
case "${1:-}" in
away)
  dest=${2:?usage: $0 away DIR}
  mkdir -p "$dest"
  for d in "${DIRS[@]}"; do [ -e "$dest/$d" ] && { echo "$dest/$d exists: not overwriting" >&2; exit 1; }; done
  for d in "${DIRS[@]}"; do mv "$d" "$dest/"; done
  echo "moved ${DIRS[*]} to $dest"
  ;;
back)
  src=${2:?usage: $0 back DIR}
  for d in "${DIRS[@]}"; do [ -e "$d" ] && { echo "$d is back already: not overwriting" >&2; exit 1; }; done
  for d in "${DIRS[@]}"; do mv "$src/$d" .; done
  git status --short | head -5
  ;;
*)
  echo "usage: $0 away DIR | back DIR" >&2
  exit 2
  ;;
esac
