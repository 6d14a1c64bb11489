#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs a test program on the X display xvfb-run made, under openbox, so that maximising,
# restoring and the window frame are a real window manager's (gui.laptop).
#   under-window-manager.sh OPENBOX PROGRAM [ARGS...]
openbox=$1
shift
"$openbox" --sm-disable >/dev/null 2>&1 &
wm=$!
# openbox manages the display once it has read its configuration: two seconds (or its exit).
for _ in 1 2 3 4 5 6 7 8 9 10; do
  kill -0 "$wm" 2>/dev/null || break
  sleep 0.2
done
SHARDSCOPE_TEST_WM=openbox "$@"
rc=$?
kill "$wm" 2>/dev/null
wait "$wm" 2>/dev/null
exit $rc
