import { loadConfig, loadDotEnv } from '../config.js';
import { processMemoryFacts } from '../ops/memory-budget.js';

/*
 * `npm start`'s V8 heap flag, from the memory budget (`ops/memory-budget.ts`): prints
 * `--max-old-space-size=<MiB>`, the budget's heap less the young generation. The budget is
 * computed from the settings and the container's limit, not from this process's own heap. Prints
 * nothing when the settings are invalid: the server then refuses them itself, one line each.
 */
try {
  loadDotEnv();
  const { containerLimitBytes } = processMemoryFacts();
  const { memory } = loadConfig(process.env, { containerLimitBytes, heapLimitBytes: Number.MAX_SAFE_INTEGER });
  process.stdout.write(`--max-old-space-size=${memory.oldSpaceMiB}`);
} catch {
  // The server reports the problem.
}
