"""OpenTelemetry spans as tailprof items (docs/MARKERS.md, "Trace context").

For the OpenTelemetry Python SDK::

    from opentelemetry.sdk.trace import TracerProvider
    from tailprof_markers.otel import TailprofSpanProcessor
    provider = TracerProvider()
    provider.add_span_processor(TailprofSpanProcessor())

Each selected span (by default: root spans, i.e. without a parent or with a remote one,
and SERVER spans) becomes an item: it begins when the span starts, ends when it ends, its
class is the span's name, and the span's trace id and span id are stored with it, so
``tailprof items TRACE --trace-id ID`` finds the request of a trace seen as slow in a
tracing UI. With asyncio and ``tailprof_markers.install_asyncio()``, the span's item
follows its task: it is current exactly while the task runs between awaits.

The item id is the span id. Importing this module does not need opentelemetry (the
processor only uses the spans it is given); the SDK calls ``on_start`` in the code that
starts the span, which is what makes the item the thread's (and the task's) current one.
"""

import asyncio

import tailprof_markers as _tp

__all__ = ["TailprofSpanProcessor"]

# SpanKind.SERVER's value in opentelemetry.trace (an enum; compared by name so that
# this module does not import opentelemetry).
_SERVER = "SERVER"
# Items begun and not yet ended, per processor (a span that never ends must not make
# the table grow without bound).
_MAX_OPEN = 65536


def _kind_name(kind):
    return getattr(kind, "name", str(kind))


class TailprofSpanProcessor:
    """A span processor (``provider.add_span_processor(TailprofSpanProcessor())``) that
    marks selected spans as tailprof items.

    ``roots``: spans without a local parent become items (default True).
    ``kinds``: span kinds that become items (names or ``SpanKind`` values; default
    SERVER). ``select``: a callable ``(span) -> bool`` that replaces both rules.
    """

    def __init__(self, roots=True, kinds=(_SERVER,), select=None):
        self._roots = roots
        self._kinds = frozenset(_kind_name(k) for k in kinds)
        self._select = select
        # span id -> context-variable token (or None outside asyncio).
        self._open = {}
        self.dropped = 0

    def _selected(self, span):
        if self._select is not None:
            return bool(self._select(span))
        if _kind_name(getattr(span, "kind", None)) in self._kinds:
            return True
        parent = getattr(span, "parent", None)
        return self._roots and (parent is None or getattr(parent, "is_remote", False))

    def on_start(self, span, parent_context=None):
        if not _tp.enabled():
            return
        ctx = span.get_span_context()
        if ctx is None or not ctx.is_valid or not self._selected(span):
            return
        if len(self._open) >= _MAX_OPEN:
            self.dropped += 1
            return
        item = ctx.span_id
        _tp.item_begin(item, span.name or None)
        _tp.item_trace(item, ctx.trace_id, ctx.span_id)
        token = None
        if asyncio._get_running_loop() is not None:
            # The span's task works on the item (install_asyncio's switch markers).
            token = _tp.set_task_item(item)
        self._open[item] = token

    def on_end(self, span):
        ctx = span.get_span_context()
        if ctx is None:
            return
        item = ctx.span_id
        if item not in self._open:
            return
        token = self._open.pop(item)
        _tp.item_end(item)
        if token is not None:
            _tp.reset_task_item(token)

    def _on_ending(self, span):
        pass

    def shutdown(self):
        self._open.clear()

    def force_flush(self, timeout_millis=30000):
        return True
