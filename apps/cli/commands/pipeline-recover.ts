/**
 * `streaminfer pipeline recover --partition <k> --from previous|ack-floor`: the operator's way out for a
 * partition the pipeline reports `failed` (its checkpoint does not read; /health lists it under
 * partitions_failed). Calls POST /api/partitions/<k>/recover on the pipeline's admin listener (the one
 * holding the partition's lease).
 */
import { Command, Option } from 'commander';
import { readTokenFile } from '../../../libs/admin';
import { callServer } from '../client';

interface RecoverFlags {
  partition: string;
  from: 'previous' | 'ack-floor';
  adminUrl: string;
  tokenFile?: string;
  json?: boolean;
}

interface RecoverAnswer {
  partition?: number;
  from?: string;
  quarantined?: string | null;
  restored?: { id: number; position: number; object: string };
  state?: string;
  error?: string;
  code?: string;
  message?: string;
}

export function pipelineRecoverCommand(fail: (message: string) => never): Command {
  return new Command('recover')
    .description(
      "recover a failed partition (its checkpoint does not read): keep the bad pointer aside and restore from the previous checkpoint, or start from the broker's ack floor with empty keyed state",
    )
    .requiredOption('--partition <k>', 'the failed partition (see partitions_failed in /health)')
    .addOption(
      new Option(
        '--from <where>',
        'previous: the newest earlier checkpoint that reads; ack-floor: empty state at the ack floor',
      )
        .choices(['previous', 'ack-floor'])
        .makeOptionMandatory(),
    )
    .option(
      '--admin-url <url>',
      "the pipeline's admin listener: http(s)://host:port or unix:/path",
      'http://127.0.0.1:9470',
    )
    .option('--token-file <file>', 'file holding the admin token (else STREAMINFER_ADMIN_TOKEN)')
    .option('--json', 'machine-readable output')
    .action(async (flags: RecoverFlags) => {
      const partition = Number(flags.partition);
      if (!Number.isSafeInteger(partition) || partition < 0)
        fail(`--partition must be a partition number (got ${flags.partition})`);
      let token: string | undefined;
      try {
        token = flags.tokenFile
          ? readTokenFile(flags.tokenFile)
          : process.env.STREAMINFER_ADMIN_TOKEN?.trim() || undefined;
      } catch (err) {
        fail((err as Error).message);
      }
      let answer: { status: number; body: unknown };
      try {
        answer = await callServer(
          { url: flags.adminUrl, ...(token ? { token } : {}), timeoutMs: 120_000 },
          'POST',
          `/api/partitions/${partition}/recover`,
          { from: flags.from },
        );
      } catch (err) {
        fail((err as Error).message);
      }
      const a = answer.body as RecoverAnswer;
      if (flags.json) console.log(JSON.stringify({ status: answer.status, ...a }));
      else if (a.restored)
        console.log(
          `partition ${a.partition}: ${a.quarantined ? `pointer kept aside as ${a.quarantined}, ` : ''}restored from ${a.from} (checkpoint ${a.restored.id}, position ${a.restored.position}): ${a.state}${a.error ? ` (${a.error})` : ''}`,
        );
      else console.error(`recover failed (${answer.status} ${a.code}): ${a.message}`);
      if (answer.status !== 200) process.exitCode = 1;
    });
}
