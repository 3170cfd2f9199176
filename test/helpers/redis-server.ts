import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { onFreePort, PORT_TAKEN } from './postgres-cluster.js';

/*
 * A throwaway Redis-protocol server on loopback (Debian's redis-server or valkey-server), for the
 * tests of the shared rate-limit store. Nothing is persisted; the folder goes with it.
 */

/** The server binary found on this machine, if any. */
export function redisBinary(): string | undefined {
  for (const name of ['valkey-server', 'redis-server']) {
    const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
    if (found.status === 0 && found.stdout.trim()) return found.stdout.trim();
  }
  return undefined;
}

export type RedisServer = { url: string; port: number; stop(): Promise<void>; pause(): void; resume(): void };

/** Answers PING with PONG within the deadline, or throws. */
async function waitForPong(port: number, deadline: number): Promise<void> {
  for (;;) {
    const pong = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
      socket.setTimeout(500, () => socket.destroy());
      socket.on('data', (data) => {
        resolve(data.toString().startsWith('+PONG'));
        socket.destroy();
      });
      socket.on('error', () => resolve(false));
      socket.on('close', () => resolve(false));
    });
    if (pong) return;
    if (Date.now() > deadline) throw new Error(`the Redis-protocol server on port ${port} did not answer`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export async function startRedis(binary: string): Promise<RedisServer> {
  const dir = mkdtempSync(path.join(tmpdir(), 'redis-test-'));
  let child!: ChildProcess;
  const port = await onFreePort(
    async (port) => {
      let said = '';
      child = spawn(
        binary,
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--save',
          '',
          '--appendonly',
          'no',
          '--dir',
          dir,
          '--daemonize',
          'no',
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      child.stdout!.on('data', (chunk) => (said += chunk));
      child.stderr!.on('data', (chunk) => (said += chunk));
      const exited = new Promise<never>((_, reject) =>
        child.once('exit', () => reject(new Error(`the Redis-protocol server exited: ${said}`))),
      );
      exited.catch(() => {});
      await Promise.race([waitForPong(port, Date.now() + 10_000), exited]);
      return port;
    },
    (error) => PORT_TAKEN.test(String(error)),
  );
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    // A frozen server: connections stay open, nothing is answered.
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    stop: async () => {
      child.kill('SIGCONT');
      child.kill('SIGTERM');
      await new Promise((resolve) => (child.exitCode !== null ? resolve(undefined) : child.once('exit', resolve)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
