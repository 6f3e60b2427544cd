import { existsSync, readFileSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../errors.js';
import type { Runtime } from '../runtime/runtime.js';
import { checkPasswordPolicy, type PasswordPolicy } from './passwords.js';

/**
 * The first admin's password given in advance (docs/operations.md): `SWITCHYARD_ADMIN_PASSWORD`, or the first line of
 * the file named by `SWITCHYARD_ADMIN_PASSWORD_FILE` (Docker / Kubernetes secrets). Used at first boot only; then no
 * `admin_password` file is written. Undefined when neither is set. A ConfigError when the file cannot be read, both
 * are set, or the password breaks the AuthManager password policy.
 */
export function initialAdminPassword(policy: PasswordPolicy, env: NodeJS.ProcessEnv = process.env): { password: string; source: string } | undefined {
  const direct = env.SWITCHYARD_ADMIN_PASSWORD;
  const file = env.SWITCHYARD_ADMIN_PASSWORD_FILE;
  if (direct && file) throw new ConfigError('environment: set SWITCHYARD_ADMIN_PASSWORD or SWITCHYARD_ADMIN_PASSWORD_FILE, not both');
  let password: string;
  let source: string;
  if (direct) {
    password = direct;
    source = 'SWITCHYARD_ADMIN_PASSWORD';
  } else if (file) {
    try {
      password = readFileSync(file, 'utf8').split(/\r?\n/)[0] ?? '';
    } catch (err) {
      throw new ConfigError(`environment SWITCHYARD_ADMIN_PASSWORD_FILE: cannot read ${file}: ${(err as Error).message}`);
    }
    source = `SWITCHYARD_ADMIN_PASSWORD_FILE (${file})`;
  } else return undefined;
  try {
    checkPasswordPolicy(password, policy);
  } catch (err) {
    throw new ConfigError(`environment ${source}: ${(err as Error).message}`);
  }
  return { password, source };
}

/** `{dataDirectory}/admin_password`, written at first boot when no password was given in advance. */
export function generatedPasswordFile(rt: Pick<Runtime, 'config'>): string {
  return join(rt.config.MessageDaemon.dataDirectory, 'admin_password');
}

/**
 * admin's password was changed (REST or `switchyard user passwd admin`): the generated first-boot password is no longer
 * valid, so its file goes, and the log says so. Returns true when a file was deleted.
 */
export function forgetGeneratedPassword(rt: Pick<Runtime, 'config' | 'log'>, username: string): boolean {
  if (username !== 'admin') return false;
  const file = generatedPasswordFile(rt);
  if (!existsSync(file)) return false;
  try {
    unlinkSync(file);
  } catch (err) {
    rt.log.warn({ file, err: (err as Error).message }, 'the password of admin changed, but the file of its first-boot password could not be deleted');
    return false;
  }
  rt.log.info({ file }, 'the password of admin changed: deleted the file of its first-boot password');
  return true;
}
