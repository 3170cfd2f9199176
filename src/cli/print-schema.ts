import { helpIfAsked } from './help.js';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { printedSchema } from '../graphql/schema.js';

helpIfAsked(`usage: npm run schema:print

Writes the GraphQL schema, as the code defines it, to schema.graphql at the repository's root.`);
const target = fileURLToPath(new URL('../../schema.graphql', import.meta.url));
writeFileSync(target, printedSchema());
console.log(`wrote ${target}`);
