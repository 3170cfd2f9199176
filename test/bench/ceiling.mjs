// The ceiling: node:http answering the same bytes as the floor, from memory (no database). A POST
// has its body read and parsed as JSON first, as the least a server taking a GraphQL request by
// POST does: the difference between the two is what that framing costs on bare node:http.
import { createServer } from 'node:http';

const body = process.env.CEILING_BODY;
const answer = (response) => {
  response.writeHead(200, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
  });
  response.end(body);
};
createServer((request, response) => {
  if (request.method !== 'POST') return answer(response);
  const chunks = [];
  request.on('data', (chunk) => chunks.push(chunk));
  request.on('end', () => {
    JSON.parse(Buffer.concat(chunks).toString('utf8'));
    answer(response);
  });
}).listen(Number(process.env.PORT), '127.0.0.1', () => console.log('ceiling ready'));
