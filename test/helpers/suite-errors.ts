import { appendFileSync } from 'node:fs';
import path from 'node:path';
import type { Reporter, TestModule, TestSuite } from 'vitest/node';

/*
 * A reporter for the test command: the error of a failed file or describe block (a beforeAll that
 * threw, a module that did not load), which vitest's JSON report leaves out. One JSON line each,
 * `{ file, error }`, appended to the file named by SUITE_ERRORS_FILE.
 */
export default class SuiteErrors implements Reporter {
  private record(file: string, errors: readonly { message?: string; stack?: string }[]): void {
    const to = process.env.SUITE_ERRORS_FILE;
    if (!to) return;
    for (const error of errors)
      appendFileSync(
        to,
        `${JSON.stringify({ file: path.resolve(file), error: error.message ?? error.stack ?? 'unknown' })}\n`,
      );
  }

  onTestSuiteResult(suite: TestSuite): void {
    this.record(suite.module.moduleId, suite.errors());
  }

  onTestModuleEnd(module: TestModule): void {
    this.record(module.moduleId, module.errors());
  }
}
