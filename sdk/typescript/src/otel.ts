/**
 * The active OpenTelemetry span's trace, for checks that name no trace: `loop-detector-sdk/otel`, a module of its
 * own so that the SDK's main entry point keeps no dependency (it needs `@opentelemetry/api`, an optional peer).
 *
 *     import { LoopGuard } from 'loop-detector-sdk';
 *     import { activeTraceId } from 'loop-detector-sdk/otel';
 *
 *     const guard = new LoopGuard({ endpoint: 'http://127.0.0.1:8080', currentTraceId: activeTraceId });
 *     await guard.beforeCall({});   // inside a span: the span's trace (the service knows its session)
 *
 * The Python SDK does the same by default (`use_otel_trace`).
 */

import { isSpanContextValid, trace } from '@opentelemetry/api';

/** The active span's trace id (32 hex digits), or undefined outside a span (or in a non-recording context). */
export function activeTraceId(): string | undefined {
  const context = trace.getActiveSpan()?.spanContext();
  return context && isSpanContextValid(context) ? context.traceId : undefined;
}
