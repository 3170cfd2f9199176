import { describeConfig, loadConfigOrExit } from '../config.js';
import { helpIfAsked } from './help.js';

/** `npm run config`: the configuration the server would run with, secrets masked. */
helpIfAsked(`usage: npm run config

Prints, as JSON, the configuration the server would start with: the environment, plus .env in
development (variables already set win), with every default applied. Secrets are masked: the
database password and PAGINATION_SECRET. Invalid settings are listed one per line (exit 2).`);
console.log(JSON.stringify(describeConfig(loadConfigOrExit()), null, 2));
