/**
 * `streaminfer models keygen --out FILE`: a new Ed25519 signing key for `models push --signing-key`. The private
 * key (PEM PKCS#8, what `openssl genpkey -algorithm ed25519` writes) goes to FILE with mode 0600, the public key
 * to FILE.pub (what a host's `--trusted-keys` file holds); neither file is overwritten.
 */
import { generateKeyPairSync } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import * as path from 'node:path';
import type { Command } from 'commander';
import { keyIdOf, publicKeyPem } from '../../../libs/signing';

export function registerModelsKeygen(models: Command, fail: (message: string) => never): void {
  models
    .command('keygen')
    .description(
      'make an Ed25519 key pair for signed model pushes (FILE: private, mode 0600; FILE.pub: public)',
    )
    .requiredOption('--out <file>', 'where the private key goes; the public key goes to <file>.pub')
    .option('--json', 'machine-readable output')
    .action((flags: { out: string; json?: boolean }) => {
      const privateFile = path.resolve(flags.out);
      const publicFile = `${privateFile}.pub`;
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      const pub = publicKeyPem(publicKey);
      try {
        // 'wx': never replace a key that may already sign what a fleet runs.
        writeFileSync(privateFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), {
          mode: 0o600,
          flag: 'wx',
        });
      } catch (error) {
        fail(
          `cannot write ${privateFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
        );
      }
      try {
        writeFileSync(publicFile, pub, { mode: 0o644, flag: 'wx' });
      } catch (error) {
        fail(
          `cannot write ${publicFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
        );
      }
      const keyId = keyIdOf(publicKey);
      if (flags.json) console.log(JSON.stringify({ privateKey: privateFile, publicKey: publicFile, keyId }));
      else
        console.log(
          `private key ${privateFile} (mode 0600: keep it off the hosts), public key ${publicFile}, key id ${keyId}\n` +
            `add the public key to every host's --trusted-keys file:\n${pub}`,
        );
    });
}
