// The ceiling: node:http answering the same bytes as the floor, from memory (no database).
import { createServer } from 'node:http';

const body = process.env.CEILING_BODY;
createServer((request, response) => {
  response.writeHead(200, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(body) });
  response.end(body);
}).listen(Number(process.env.PORT), '127.0.0.1', () => console.log('ceiling ready'));
