"""OpenTelemetry spans as tailprof items (tests/async_items.rs, otel_*).

usage: otel_spans.py PYTHON_DIR

An asyncio program traced with the OpenTelemetry Python SDK and
tailprof_markers.otel.TailprofSpanProcessor: 15 concurrent requests on one thread, each a
SERVER span (10 "GET /users", one of them slow; 5 "POST /orders") with an INTERNAL child
span (not an item) and CPU work split around awaits. Prints "enabled 0|1", "installed
0|1", then one "span TRACE_ID SPAN_ID NAME" line per request and "slow TRACE_ID".
Exits 3 when opentelemetry is not installed.
"""

import asyncio
import sys
import time

sys.path.insert(0, sys.argv[1])
import tailprof_markers as tp  # noqa: E402

try:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import SpanKind
except ImportError:
    print("no opentelemetry", flush=True)
    sys.exit(3)

from tailprof_markers.otel import TailprofSpanProcessor  # noqa: E402

provider = TracerProvider()
provider.add_span_processor(TailprofSpanProcessor())
tracer = provider.get_tracer("otel_spans")


def spin(ns):
    t0 = time.thread_time_ns()
    x = 0
    while time.thread_time_ns() - t0 < ns:
        x += 1
    return x


async def request(name, work_ms, out):
    with tracer.start_as_current_span(name, kind=SpanKind.SERVER) as span:
        for _ in range(4):
            spin(work_ms * 1_000_000 // 4)
            await asyncio.sleep(0.001)
        with tracer.start_as_current_span("db query"):
            await asyncio.sleep(0.001)
        c = span.get_span_context()
        out.append((format(c.trace_id, "032x"), format(c.span_id, "016x"), name, work_ms))


async def main():
    print("enabled", int(tp.enabled()), flush=True)
    print("installed", int(tp.install_asyncio()), flush=True)
    out = []
    reqs = [request("GET /users", 150 if i == 3 else 12, out) for i in range(10)]
    reqs += [request("POST /orders", 12, out) for _ in range(5)]
    await asyncio.gather(*reqs)
    for trace_id, span_id, name, work in out:
        print("span", trace_id, span_id, name, flush=True)
        if work > 100:
            print("slow", trace_id, flush=True)


asyncio.run(main())
