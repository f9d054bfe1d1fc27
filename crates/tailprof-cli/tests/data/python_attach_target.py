"""A pure-Python program that marks items in a loop and knows nothing of tailprof: started
without TAILPROF_MARKERS, attached later with `tailprof record -p PID`
(tests/python_attach.rs), which kills it. Classes: every 10th item is "slow", the others
"fast". With an argument SECS: says "ready", then waits SECS before importing the module
(a server that imports it lazily); with the argument "stdin": says "ready", then imports it
when a line comes on stdin."""
import sys
import time

ON_STDIN = len(sys.argv) > 1 and sys.argv[1] == "stdin"
DELAY = float(sys.argv[1]) if len(sys.argv) > 1 and not ON_STDIN else 0.0
if ON_STDIN:
    print("ready", flush=True)
    sys.stdin.readline()
elif DELAY:
    print("ready", flush=True)
    time.sleep(DELAY)

import tailprof_markers as tp  # noqa: E402


def work(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


if not DELAY and not ON_STDIN:
    print("ready", flush=True)
i = 0
while True:
    i += 1
    with tp.item(i, "slow" if i % 10 == 0 else "fast"):
        work(20000 if i % 10 == 0 else 2000)
    time.sleep(0.0005)
