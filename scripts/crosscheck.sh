#!/usr/bin/env bash
# Cross-reader proof for the model format: a model written by the Go code is
# read by Arrow JS (npm apache-arrow), which knows nothing of emsf, and what
# it reads (metadata, row counts, shapes, the first row of D bitwise) must
# match what the writer says it wrote. The same model written as a model
# dataset (parts and a manifest) is read through its manifest and must form
# the same table, every row and value bit included. Exits non-zero on any
# mismatch.
#
#   scripts/crosscheck.sh
#
# Environment: ARROW_JS_VERSION (default 21.1.0); EMSF_NODE_DIR, a folder
# to install apache-arrow into and reuse across runs (default: a temporary
# folder, removed at exit).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=${ARROW_JS_VERSION:-21.1.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nodedir=${EMSF_NODE_DIR:-$work/node}
mkdir -p "$nodedir"

if [ ! -f "$nodedir/node_modules/apache-arrow/package.json" ] ||
	[ "$(node -p "require('$nodedir/node_modules/apache-arrow/package.json').version")" != "$version" ]; then
	npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$nodedir" "apache-arrow@$version" >&2
fi

go run ./arrowio/internal/mkmodel "$work/model.arrow" "$work/dataset" >"$work/want.txt"
EMSF_NODE_MODULES="$nodedir/node_modules" node scripts/read_model.mjs "$work/model.arrow" >"$work/js.txt"
EMSF_NODE_MODULES="$nodedir/node_modules" node scripts/read_model.mjs "$work/dataset" >"$work/js-dataset.txt"
grep -v '^d_first=\|^table_sha256=' "$work/js.txt" >"$work/got.txt"

if ! diff -u "$work/want.txt" "$work/got.txt"; then
	echo "crosscheck: Arrow JS $version reads the model differently from what Go wrote (diff above: - Go, + JS)" >&2
	exit 1
fi
if ! diff -u "$work/js.txt" "$work/js-dataset.txt"; then
	echo "crosscheck: Arrow JS $version reads the model dataset as another table than the model file (diff above: - file, + dataset)" >&2
	exit 1
fi
echo "crosscheck: Arrow JS $version reads the Go model file: $(tr '\n' ' ' <"$work/got.txt")"
echo "crosscheck: and the model dataset ($(ls "$work/dataset" | wc -l) files) as the same table: $(grep '^table_sha256=' "$work/js-dataset.txt")"
