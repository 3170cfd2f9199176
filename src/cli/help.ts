/** `--help` (or `-h`) anywhere in a command's arguments: prints `text` and exits 0. */
export function helpIfAsked(text: string, argv: readonly string[] = process.argv.slice(2)): void {
  if (!argv.includes('--help') && !argv.includes('-h')) return;
  console.log(text);
  process.exit(0);
}
