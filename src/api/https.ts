import { readFileSync } from 'node:fs';
import { createSecureContext, type SecureContextOptions, type TlsOptions } from 'node:tls';
import type { RestApiConfig } from '../config/schema.js';
import { ConfigError } from '../errors.js';

/**
 * `RestApi.sslConfig` → the TLS options of the REST server (Fastify's `https`), or undefined for plain HTTP. The
 * keys are the ssl:// endpoints' (keyFile, certFile, caFile, passphrase, clientCertificateRequired / Wanted). The
 * files are read and the key checked against the certificate here, at start, so a wrong path or a key that does not
 * match is a configuration error (exit 2) naming the key, not a failure on the first connection.
 */
export function restTlsOptions(rest: RestApiConfig): TlsOptions | undefined {
  const ssl = rest.sslConfig;
  if (!ssl) return undefined;
  const read = (key: 'keyFile' | 'certFile' | 'caFile', path: string) => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw new ConfigError(`section 'RestApi', key 'sslConfig.${key}': cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  };
  const opts: TlsOptions & SecureContextOptions = {
    key: read('keyFile', ssl.keyFile),
    cert: read('certFile', ssl.certFile),
    passphrase: ssl.passphrase,
    requestCert: ssl.clientCertificateRequired || ssl.clientCertificateWanted,
    rejectUnauthorized: ssl.clientCertificateRequired,
  };
  if (ssl.caFile) opts.ca = read('caFile', ssl.caFile);
  try {
    createSecureContext(opts); // a PEM that does not parse, a wrong passphrase, a key that is not the certificate's
  } catch (err) {
    throw new ConfigError(`section 'RestApi', key 'sslConfig': the key and certificate cannot be used (${ssl.keyFile}, ${ssl.certFile}): ${(err as Error).message}`);
  }
  return opts;
}
