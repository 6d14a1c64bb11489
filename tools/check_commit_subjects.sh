#!/usr/bin/env bash
# Fails on a commit subject longer than 72 characters (git log's one-line view, a mail subject):
# every commit after the baseline, the last one before this check, or one message file
# (the commit-msg hook's argument). Details go in the body.
#   tools/check_commit_subjects.sh            the commits since the baseline
#   tools/check_commit_subjects.sh --msg FILE one message about to be committed
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C.UTF-8 # lengths in characters: "—" and "▸" are one each
MAX=72
BASELINE=e62b760ebcf45b1963edb33ed5697558042aa813 # older subjects are history, not rewritten

if [ "${1:-}" = --msg ]; then
    subject=$(grep -v '^#' "$2" | sed -n '/./{p;q}')
    if [ "${#subject}" -gt "$MAX" ]; then
        echo "commit subject is ${#subject} characters, more than $MAX: put the details in the body" >&2
        echo "  $subject" >&2
        exit 1
    fi
    exit 0
fi
# A shallow clone without the baseline: its newest commit alone.
range=(-1 HEAD)
git cat-file -e "$BASELINE^{commit}" 2>/dev/null && range=("$BASELINE..HEAD")
bad=$(git log --format='%h %s' "${range[@]}" | while IFS= read -r line; do
    subject=${line#* }
    [ "${#subject}" -le "$MAX" ] || printf '%s\n' "$line"
done)
if [ -n "$bad" ]; then
    echo "commit subjects longer than $MAX characters (details go in the body):" >&2
    printf '  %s\n' "$bad" >&2
    exit 1
fi
echo "every commit subject since the baseline is $MAX characters or fewer"
