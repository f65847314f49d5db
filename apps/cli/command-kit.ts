/**
 * What the control commands share: the admin listener's options, reading them into a target, and printing an
 * admin answer (exit code 1 unless the server answered 200). Commands take it as their `kit`.
 */
import type { Command } from 'commander';
import { ConfigError } from '../../libs/config';
import { type AdminFlags, adminTarget, type ClientOptions, callServer } from './client';

/** Prints the message as `streaminfer: …` and exits 2 (a usage or setting error). */
export function fail(message: string): never {
  console.error(`streaminfer: ${message}`);
  process.exit(2);
}

/**
 * The options every control command has: where the admin listener is and its token (client.ts adminTarget).
 * `reload` has a --config of its own (the file it applies, which also locates the listener).
 */
export function addClientOptions(command: Command, withConfig = true): Command {
  command
    .option(
      '--url <url>',
      'admin listener: http(s)://host:port or unix:/path (default: found from the settings, else http://127.0.0.1:8001)',
    )
    .option('--admin-socket <path>', "the server's admin unix socket (STREAMINFER_ADMIN_SOCKET)")
    .option('--token-file <file>', 'file holding the admin token')
    .option('--token <token>', 'admin token (visible in ps: prefer --token-file or STREAMINFER_ADMIN_TOKEN)');
  if (withConfig)
    command.option('--config <file>', 'server config file: its admin settings locate the listener and token');
  return command.option('--json', 'machine-readable output');
}

export interface ClientFlags extends AdminFlags {
  json?: boolean;
}

export function clientOptions(flags: AdminFlags): ClientOptions {
  try {
    return adminTarget(flags);
  } catch (error) {
    fail(error instanceof ConfigError ? error.message : (error as Error).message);
  }
}

/**
 * Prints an admin answer and sets the exit code (1 unless the server answered 200). `--json`: the answer as
 * sent, pretty-printed, or with `statusInJson` on one line with the HTTP status folded in; else `human`.
 */
export function report<T>(
  flags: ClientFlags,
  status: number,
  answer: T,
  human: (answer: T, status: number) => void,
  statusInJson = false,
): void {
  if (flags.json)
    console.log(
      statusInJson ? JSON.stringify({ status, ...(answer as object) }) : JSON.stringify(answer, null, 2),
    );
  else human(answer, status);
  if (status !== 200) process.exitCode = 1;
}

/** One admin call, its answer printed by `report`. */
export async function runAdmin<T>(
  flags: ClientFlags,
  method: 'GET' | 'POST',
  path: string,
  body: Record<string, unknown> | undefined,
  human: (answer: T, status: number) => void,
  statusInJson = false,
): Promise<void> {
  const { status, body: answer } = await callServer(clientOptions(flags), method, path, body);
  report(flags, status, answer as T, human, statusInJson);
}

/** A refusal as the server typed it. */
export function printRefusal(
  what: string,
  status: number,
  answer: { code?: string; message?: string },
): void {
  console.error(`${what} failed (${status} ${answer.code}): ${answer.message}`);
}

export interface CommandKit {
  addClientOptions(command: Command, withConfig?: boolean): Command;
  clientOptions(flags: AdminFlags): ClientOptions;
  fail(message: string): never;
}

/** The kit handed to each command's register function. */
export const commandKit: CommandKit = { addClientOptions, clientOptions, fail };
