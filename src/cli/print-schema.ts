import { helpIfAsked } from './help.js';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { possibleTypes, printedSchema } from '../graphql/schema.js';
import { persistedOperationsManifest } from '../graphql/operations.js';

helpIfAsked(`usage: npm run schema:print

Writes the GraphQL schema, as the code defines it, to schema.graphql at the repository's root,
the stored operations' ids to src/graphql/persisted-operations.json, and each interface's types
to src/graphql/possible-types.json (Apollo Client's possibleTypes).`);
const target = fileURLToPath(new URL('../../schema.graphql', import.meta.url));
writeFileSync(target, printedSchema());
console.log(`wrote ${target}`);
// The source's copy, from the sources or the build alike (dist/cli and src/cli are at the same depth).
const manifest = fileURLToPath(new URL('../../src/graphql/persisted-operations.json', import.meta.url));
writeFileSync(manifest, `${JSON.stringify(persistedOperationsManifest(), null, 2)}\n`);
console.log(`wrote ${manifest}`);
const possible = fileURLToPath(new URL('../../src/graphql/possible-types.json', import.meta.url));
writeFileSync(possible, `${JSON.stringify(possibleTypes(), null, 2)}\n`);
console.log(`wrote ${possible}`);
