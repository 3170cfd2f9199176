// One benchmark run through autocannon's API, for the rows that need more than its command line:
// a different bearer token on every request, picked at random from a file (one per line), as many
// distinct users send them, each from an address of its own (`X-Forwarded-For`, which the bench's
// server trusts from loopback), as a load balancer passes them on. Prints autocannon's result as JSON, as `autocannon -j` does.
// With `prime`, each token is sent exactly once, in order (a server that has seen every user); with
// `from` and `to` too, those of the tokens from `from` up to `to` (a slice of that pass).
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';

const options = JSON.parse(process.argv[2]);
const all = readFileSync(options.tokensFile, 'utf8').split('\n').filter(Boolean);
const tokens = options.prime ? all.slice(options.from ?? 0, options.to ?? all.length) : all;
const headers = options.headers ?? {};
let next = 0;
const pick = options.prime ? () => next++ % tokens.length : () => Math.floor(Math.random() * tokens.length);
const addressOf = (i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const result = await autocannon({
  url: options.url,
  connections: options.connections,
  ...(options.prime ? { amount: tokens.length } : { duration: options.duration }),
  requests: [
    {
      method: options.method ?? 'GET',
      headers,
      body: options.body,
      setupRequest: (request) => {
        const i = pick();
        return {
          ...request,
          headers: { ...request.headers, authorization: `Bearer ${tokens[i]}`, 'x-forwarded-for': addressOf(i) },
        };
      },
    },
  ],
});
process.stdout.write(JSON.stringify(result));
