// Opens `count` live subscriptions to `url` with `token` (GraphQL over SSE, distinct connections),
// reports on stdout when each has had its first event, then counts events until killed.
import { request } from 'node:http';

// `@file` for the token: one token per line, each stream with the next (many callers); a fifth
// argument: the subscription to send.
import { readFileSync } from 'node:fs';

const [url, token, count] = [process.argv[2], process.argv[3], Number(process.argv[4])];
const tokens = token.startsWith('@') ? readFileSync(token.slice(1), 'utf8').split('\n').filter(Boolean) : [token];
const target = new URL(url);
const body = JSON.stringify({
  query: process.argv[5] ?? 'subscription { creditAnalysisChanged { creditBalance operationUsage { signIns } } }',
});
let ready = 0;
let events = 0;
let failed = 0;
// A stream refused 503 (the server busy, or low on memory) is asked for again after its Retry-After, as clients do.
const open = (i, tries = 0) =>
  new Promise((resolve) => {
    const req = request(
      {
        host: target.hostname,
        port: target.port,
        path: '/graphql',
        method: 'POST',
        agent: false,
        headers: {
          authorization: `Bearer ${tokens[i % tokens.length]}`,
          'content-type': 'application/json',
          accept: 'text/event-stream',
          'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) Chrome/120',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        if (res.statusCode === 503 && tries < 5) {
          res.resume();
          setTimeout(() => open(i, tries + 1).then(resolve), Number(res.headers['retry-after'] ?? 1) * 1000);
          return;
        }
        if (res.statusCode !== 200) {
          res.resume();
          failed += 1;
          if (failed === 1) console.error(`a subscription answered ${res.statusCode}`);
          resolve();
          return;
        }
        let first = true;
        res.setEncoding('utf8');
        res.on('data', (text) => {
          const n = text.split('event: next').length - 1;
          if (n > 0 && first) {
            first = false;
            if (text.includes('"errors"')) {
              failed += 1;
              if (failed === 1) console.error(text.slice(0, 400));
            } else ready += 1;
            resolve();
          }
          events += n;
        });
        res.on('error', () => {});
      },
    );
    req.on('error', (error) => {
      failed += 1;
      if (failed === 1) console.error(`a subscription failed: ${error.message}`);
      resolve();
    });
    req.end(body);
  });
for (let i = 0; i < count; i += 200)
  await Promise.all(Array.from({ length: Math.min(200, count - i) }, (_, k) => open(i + k)));
console.log(JSON.stringify({ ready, failed }));
setInterval(() => console.log(JSON.stringify({ events })), 1000);
