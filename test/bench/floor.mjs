// The floor: the least a server can do to answer "one account row out of PostgreSQL as JSON":
// node:http and one prepared pg query by primary key, nothing else.
import { createServer } from 'node:http';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
const id = process.env.FLOOR_ACCOUNT_ID;
const query = { name: 'profile', text: 'SELECT * FROM "Account" WHERE id = $1' };

createServer(async (request, response) => {
  try {
    const { rows } = await pool.query({ ...query, values: [id] });
    const body = JSON.stringify({ success: true, data: { user: rows[0] } });
    response.writeHead(200, {
      'Content-Type': 'application/json; charset=utf-8',
      'Content-Length': Buffer.byteLength(body),
    });
    response.end(body);
  } catch {
    response.writeHead(503).end();
  }
}).listen(Number(process.env.PORT), '127.0.0.1', () => console.log('floor ready'));
