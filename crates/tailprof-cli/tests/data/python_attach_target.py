"""A pure-Python program that marks items in a loop and knows nothing of tailprof: started
without TAILPROF_MARKERS, attached later with `tailprof record -p PID`
(tests/python_attach.rs), which kills it. Classes: every 10th item is "slow", the others
"fast"."""
import time

import tailprof_markers as tp


def work(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


print("ready", flush=True)
i = 0
while True:
    i += 1
    with tp.item(i, "slow" if i % 10 == 0 else "fast"):
        work(20000 if i % 10 == 0 else 2000)
    time.sleep(0.0005)
