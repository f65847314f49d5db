/**
 * `streaminfer status [--watch [seconds]]`: reads /health, the last reload (GET /api/reload, which also
 * checks the admin token) and /metrics twice, all from the admin listener, and prints one screen (status-view.ts, status-frame.ts). Rates
 * need two scrapes, so a single status takes about a second; --watch reuses each scrape as the next
 * frame's start.
 */
import type { Command } from 'commander';
import { type MetricSample, parsePrometheusText } from '../../../libs/metrics';
import { type AdminFlags, type ClientOptions, callServer } from '../client';
import { ClientError, StatusError } from '../errors';
import { type FleetAnswer, renderFleet } from '../fleet-view';
import { frameText, renderFrame, visible } from '../status-frame';
import {
  type HealthAnswer,
  type ReloadAnswer,
  readHealth,
  type StatusSnapshot,
  snapshotJson,
  summarize,
} from '../status-view';

/** Seconds between the two scrapes of a single status (and of --watch's first frame, at most). */
const FIRST_WINDOW_S = 1;
const DEFAULT_WATCH_S = 2;
const MIN_WATCH_S = 0.5;

interface Scrape {
  samples: MetricSample[];
  /** performance.now() when the answer came back. */
  at: number;
}

export interface StatusCommandKit {
  addClientOptions(command: Command): Command;
  clientOptions(flags: AdminFlags): ClientOptions;
  fail(message: string): never;
}

interface StatusFlags extends AdminFlags {
  json?: boolean;
  port?: string;
  watch?: boolean | string;
  fleet?: boolean;
}

/** An answer other than the one asked for: a typed error with the server's own words. */
function refused(what: string, status: number, body: unknown): StatusError {
  const answer = (typeof body === 'object' && body !== null ? body : {}) as {
    code?: string;
    message?: string;
  };
  const detail = answer.message ?? (typeof body === 'string' ? body.slice(0, 200) : '');
  if (status === 401)
    return new StatusError(
      'unauthorized',
      `${what}: 401 unauthorized: ${detail} (give the admin token with --token or STREAMINFER_ADMIN_TOKEN)`,
    );
  return new StatusError('unavailable', `${what}: ${status} ${answer.code ?? ''}: ${detail}`);
}

async function scrape(options: ClientOptions): Promise<Scrape> {
  const { status, body } = await callServer(options, 'GET', '/metrics');
  if (status !== 200 || typeof body !== 'string') throw refused('GET /metrics', status, body);
  return { samples: parsePrometheusText(body), at: performance.now() };
}

/** /health (503 while starting or draining is still a report) and the last reload. */
async function readState(options: ClientOptions): Promise<{ health: HealthAnswer; reload: ReloadAnswer }> {
  const [health, reload] = await Promise.all([
    callServer(options, 'GET', '/health'),
    callServer(options, 'GET', '/api/reload'),
  ]);
  if (reload.status !== 200) throw refused('GET /api/reload', reload.status, reload.body);
  if (health.status !== 200 && health.status !== 503)
    throw refused('GET /health', health.status, health.body);
  return { health: readHealth(health.body), reload: reload.body as ReloadAnswer };
}

function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

/** One frame's worth: the state now and a scrape, measured against `before`. */
async function snapshotSince(options: ClientOptions, before: Scrape): Promise<[StatusSnapshot, Scrape]> {
  const [state, after] = await Promise.all([readState(options), scrape(options)]);
  const snapshot = summarize({
    url: options.url,
    health: state.health,
    lastReload: state.reload,
    before: before.samples,
    after: after.samples,
    windowS: (after.at - before.at) / 1000,
    now: Date.now(),
  });
  return [snapshot, after];
}

function print(snapshot: StatusSnapshot, json: boolean, watching: boolean): void {
  if (json) process.stdout.write(`${JSON.stringify(snapshotJson(snapshot))}\n`);
  else if (watching) process.stdout.write(frameText(renderFrame(snapshot), isTerminal()));
  else process.stdout.write(`${renderFrame(snapshot).join('\n')}\n`);
}

/** --watch: a frame every `interval` s until SIGINT/SIGTERM (exit 0). Losing the server mid-watch is shown
 * and retried, since a restart is what one watches for; a refused token ends the watch. */
async function watch(options: ClientOptions, interval: number, json: boolean): Promise<never> {
  const stop = (): never => process.exit(0);
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  let before: Scrape | undefined = await scrape(options);
  await sleep(Math.min(FIRST_WINDOW_S, interval));
  for (;;) {
    try {
      if (!before) {
        before = await scrape(options);
        await sleep(Math.min(FIRST_WINDOW_S, interval));
      }
      const [snapshot, after] = await snapshotSince(options, before);
      before = after;
      print(snapshot, json, true);
    } catch (error) {
      if (error instanceof StatusError && error.code === 'unauthorized') throw error;
      before = undefined;
      const message = (error as Error).message;
      const clock = new Date().toISOString().slice(11, 19);
      if (json) process.stdout.write(`${JSON.stringify({ url: options.url, error: message })}\n`);
      else
        process.stdout.write(
          frameText(
            [`streaminfer ${clock} UTC: ${visible(message)}; retrying every ${interval} s`],
            isTerminal(),
          ),
        );
    }
    // The next frame's window is `interval` from this frame's scrape, whatever the answers took.
    await sleep(before ? Math.max(0, before.at + interval * 1000 - performance.now()) / 1000 : interval);
  }
}

function isTerminal(): boolean {
  return process.stdout.isTTY === true;
}

export function registerStatus(program: Command, kit: StatusCommandKit): void {
  kit
    .addClientOptions(
      program
        .command('status')
        .description(
          'nodes, epoch, models and aliases, request and shed rates, latency: one screen (rates over ~1 s)',
        ),
    )
    .option('--port <n>', 'admin listener on 127.0.0.1 at this port (instead of --url)')
    .option('--watch [seconds]', `redraw every this many seconds until Ctrl-C (default ${DEFAULT_WATCH_S})`)
    .option('--fleet', "the host's fleet: every host's epoch, readiness, versions and load (GET /api/fleet)")
    .action(async (flags: StatusFlags, command: Command) => {
      let url = flags.url;
      if (flags.port !== undefined) {
        if (command.getOptionValueSource('url') === 'cli') kit.fail('give --url or --port, not both');
        const port = Number(flags.port);
        if (!Number.isInteger(port) || port < 1 || port > 65535) kit.fail('--port must be a port number');
        url = `http://127.0.0.1:${port}`;
      }
      let interval: number | undefined;
      if (flags.watch !== undefined) {
        interval = flags.watch === true ? DEFAULT_WATCH_S : Number(flags.watch);
        if (!Number.isFinite(interval) || interval < MIN_WATCH_S)
          kit.fail(`--watch takes a number of seconds, at least ${MIN_WATCH_S}`);
      }
      const options = kit.clientOptions(url === undefined ? flags : { ...flags, url });
      if (flags.fleet) {
        await fleetStatus(options, interval, flags.json === true);
        return;
      }
      try {
        if (interval !== undefined) await watch(options, interval, flags.json === true);
        // Fail fast on a wrong token or a missing server before waiting out the window (the state first: its
        // refusal names the token).
        await readState(options);
        const before = await scrape(options);
        await sleep(FIRST_WINDOW_S);
        print((await snapshotSince(options, before))[0], flags.json === true, false);
      } catch (error) {
        if (!(error instanceof StatusError)) throw error;
        console.error(`streaminfer status: ${error.message}`);
        process.exitCode = 1;
      }
    });
}

/** `status --fleet [--watch]`: GET /api/fleet, once or every interval. */
async function fleetStatus(
  options: ClientOptions,
  interval: number | undefined,
  json: boolean,
): Promise<void> {
  for (;;) {
    let text: string;
    let failed = false;
    try {
      const { status, body } = await callServer(options, 'GET', '/api/fleet');
      if (status !== 200) throw refused('GET /api/fleet', status, body);
      text = json ? JSON.stringify(body) : renderFleet(body as FleetAnswer);
    } catch (error) {
      if (!(error instanceof StatusError || error instanceof ClientError)) throw error;
      text = json
        ? JSON.stringify({ url: options.url, error: error.message })
        : `streaminfer status: ${visible(error.message)}`;
      failed = true;
    }
    if (interval === undefined) {
      if (failed) {
        console.error(text);
        process.exitCode = 1;
      } else console.log(text);
      return;
    }
    process.stdout.write(json ? `${text}\n` : `\x1b[2J\x1b[H${text}\n`);
    await sleep(interval);
  }
}
