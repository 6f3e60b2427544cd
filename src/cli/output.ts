/**
 * Exit codes of the `switchyard` command (docs/operations.md). `switchyard start` exits with the broker's own codes
 * (src/main.ts: 0 clean, 1 fatal, 2 configuration, 3 data directory in use, 4 REST port, 5 shutdown timeout).
 */
export const EXIT_CLI = {
  OK: 0,
  /** unexpected error */
  FATAL: 1,
  /** bad command line, or a configuration error (`config check`) */
  USAGE: 2,
  /** offline command: the data directory is in use by a running broker (use --url) */
  LOCKED: 3,
  /** online command: the broker cannot be reached */
  UNREACHABLE: 4,
  /** refused: bad credentials, missing permission, password policy, conflict */
  REFUSED: 5,
  /** the named user or group does not exist */
  NOT_FOUND: 6,
  /** `acl check`: the decision is DENY; `status`: the broker answers but is not ready */
  NO: 7,
} as const;

export class CliError extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** Columns padded to their widest cell. */
export function table(rows: string[][]): string {
  if (!rows.length) return '';
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n') + '\n';
}
