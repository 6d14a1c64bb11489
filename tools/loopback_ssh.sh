#!/bin/sh
# SPDX-License-Identifier: MIT
# A stand-in for ssh (SHARDSCOPE_SSH=tools/loopback_ssh.sh): runs the remote command here, so
# that the protocol is tested through a loopback transport with the server a child process.
# Takes ssh's arguments: options up to "--", the destination, the command.
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then
        shift
        break
    fi
    shift
done
shift # the destination
# A prompt hook's test: ask SSH_ASKPASS as ssh would, and go on only with the right answer.
if [ -n "${LOOPBACK_ASKPASS_PROMPT:-}" ]; then
    answer=$("$SSH_ASKPASS" "$LOOPBACK_ASKPASS_PROMPT") || { echo "Permission denied (askpass refused)." >&2; exit 255; }
    if [ "$answer" != "${LOOPBACK_ASKPASS_ANSWER:-}" ]; then
        echo "Permission denied (wrong answer)." >&2
        exit 255
    fi
fi
# What ssh's own environment holds stays here, as it does with ssh.
unset SSH_ASKPASS SSH_ASKPASS_REQUIRE SHARDSCOPE_ASKPASS
# LOOPBACK_CACHE_DIR: the server's own persistent index, apart from the client's.
if [ -n "${LOOPBACK_CACHE_DIR:-}" ]; then
    export SHARDSCOPE_CACHE_DIR="$LOOPBACK_CACHE_DIR"
fi
# LOOPBACK_STDERR: the server's stderr into that file (ssh's goes to the client, which keeps it).
if [ -n "${LOOPBACK_STDERR:-}" ]; then
    exec sh -c "$1" 2>>"$LOOPBACK_STDERR"
fi
exec sh -c "$1"
