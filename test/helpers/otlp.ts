import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/* What the tracing tests receive: an OTLP/HTTP collector in the test, and readers of its spans. */

export type Attribute = {
  key: string;
  value: { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
};
export type ReceivedSpan = {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Attribute[];
  status?: { code?: number };
};

/** An OTLP/HTTP receiver: every export's body as received, and the spans of the JSON ones. */
export class Receiver {
  readonly bodies: { contentType: string; body: Buffer }[] = [];
  readonly spans: ReceivedSpan[] = [];
  private server: Server | undefined;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const body = Buffer.concat(chunks);
        const contentType = request.headers['content-type'] ?? '';
        this.bodies.push({ contentType, body });
        if (request.url === '/v1/traces' && contentType.startsWith('application/json')) {
          const decoded = JSON.parse(body.toString('utf8')) as {
            resourceSpans: { scopeSpans: { spans: ReceivedSpan[] }[] }[];
          };
          for (const resource of decoded.resourceSpans)
            for (const scope of resource.scopeSpans) this.spans.push(...scope.spans);
        }
        response.writeHead(200, {
          'content-type': contentType.startsWith('application/json') ? 'application/json' : 'application/x-protobuf',
        });
        response.end(contentType.startsWith('application/json') ? '{}' : '');
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Everything received, as text: what no secret may appear in. */
  text(): string {
    return this.bodies.map(({ body }) => body.toString('latin1')).join('\n');
  }

  async trace(traceId: string, until: (spans: ReceivedSpan[]) => boolean): Promise<ReceivedSpan[]> {
    for (let i = 0; i < 150; i++) {
      const spans = this.spans.filter((span) => span.traceId === traceId);
      if (until(spans)) return spans;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const received = this.spans.filter((span) => span.traceId === traceId).map((span) => span.name);
    throw new Error(`trace ${traceId} did not arrive as expected; its spans: ${JSON.stringify(received)}`);
  }

  close(): void {
    this.server?.close();
  }
}

export const attribute = (span: ReceivedSpan, key: string) => {
  const value = span.attributes.find((entry) => entry.key === key)?.value;
  return (
    value?.stringValue ??
    (value?.intValue === undefined ? (value?.boolValue ?? value?.doubleValue) : Number(value.intValue))
  );
};

/** A caller's trace context: a fresh trace id and the caller's own span id, sampled. */
export function traceparent(): { header: string; traceId: string; parentId: string } {
  const traceId = randomBytes(16).toString('hex');
  const parentId = randomBytes(8).toString('hex');
  return { header: `00-${traceId}-${parentId}-01`, traceId, parentId };
}

/** Each span's ancestors within its trace, nearest first. */
export function ancestors(spans: ReceivedSpan[], span: ReceivedSpan): ReceivedSpan[] {
  const byId = new Map(spans.map((entry) => [entry.spanId, entry]));
  const chain: ReceivedSpan[] = [];
  for (
    let parent = span.parentSpanId && byId.get(span.parentSpanId);
    parent;
    parent = parent.parentSpanId ? byId.get(parent.parentSpanId) : undefined
  )
    chain.push(parent);
  return chain;
}
