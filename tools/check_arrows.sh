#!/usr/bin/env bash
# The backend's arrows point down the pipeline, never back up: each folder of backend/src/ may
# include common/, its own headers and the folders listed for it here (docs/architecture.md has
# the same table). Fails naming the include that breaks it.
set -euo pipefail
cd "$(dirname "$0")/../backend/src"
declare -A ALLOWED=(
    [common]="" [kernels]="" [read]="" [layout]="" [diff]="" [plan]=""
    [tensor]="read" [health]="kernels" [cuda]="kernels" [c10d]="tensor"
    [verify]="health kernels" [fix]="diff" [compare]="diff health kernels"
    [report]="compare" [session]="read fix compare" [remote]="read"
)
bad=0
for dir in */; do
    dir=${dir%/}
    if [ -z "${ALLOWED[$dir]+set}" ]; then
        echo "backend/src/$dir: a folder this check does not know: add it to tools/check_arrows.sh" >&2
        bad=1
        continue
    fi
    while IFS= read -r hit; do
        file=${hit%%:*}
        target=$(sed -E 's/.*#include "([a-z0-9_]+)\/.*/\1/' <<<"$hit")
        case " $dir common shardscope ${ALLOWED[$dir]} " in
        *" $target "*) ;;
        *)
            echo "backend/src/$file includes $target/: an arrow back up the pipeline" >&2
            bad=1
            ;;
        esac
    done < <(grep -rHn --include='*.cpp' --include='*.h' --include='*.cu' -E '^#include "[a-z0-9_]+/' "$dir" || true)
done
[ "$bad" -eq 0 ] && echo "every include in backend/src/ points down the pipeline"
exit "$bad"
