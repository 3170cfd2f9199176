import { createServer as createTcpServer, connect, type Socket } from 'node:net';

/**
 * A TCP forwarder that can stall: while stalled it keeps every connection open but delivers
 * nothing in either direction (a frozen server, a path that drops packets), then delivers what it
 * held when resumed.
 */
export async function startStallingProxy(target: { host: string; port: number }) {
  let stalled = false;
  /** Cut: nothing passes, and a side that closes is not told to the other (a network that died). */
  let cut = false;
  const held: (() => void)[] = [];
  const sockets = new Set<Socket>();
  const server = createTcpServer((client) => {
    const upstream = connect(target.port, target.host);
    sockets.add(client).add(upstream);
    const forward = (from: Socket, to: Socket) =>
      from.on('data', (chunk) => {
        if (cut) return;
        if (stalled) held.push(() => to.write(chunk));
        else to.write(chunk);
      });
    forward(client, upstream);
    forward(upstream, client);
    const drop = () => {
      if (cut) return;
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    stall: () => {
      stalled = true;
    },
    /** From now on nothing passes either way and no close is passed on, until `close`. */
    cut: () => {
      stalled = true;
      cut = true;
      held.length = 0;
    },
    resume: () => {
      stalled = false;
      for (const deliver of held.splice(0)) deliver();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
