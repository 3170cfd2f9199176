/*
 * The server as `npm start` runs it, with one fault once it is ready, outside any request:
 * FAULT=rejection, a promise nobody waits for fails (a background task's bug); FAULT=exception, a
 * throw from a timer. The process must survive the first and end, with status 1, on the second.
 */
await import('../../dist/main.js');
setTimeout(() => {
  if (process.env.FAULT === 'rejection') void Promise.reject(new Error('a background task failed'));
  if (process.env.FAULT === 'exception') throw new Error('a bug outside any request');
}, 200);
