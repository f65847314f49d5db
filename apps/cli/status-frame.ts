/**
 * `streaminfer status` drawn: a summary (status-view.ts) as one screen of at most 100 columns, and the
 * bytes that put a frame on a terminal. Pure.
 */
import { FRAME_WIDTH, type ModelStatus, type Quantile, type StatusSnapshot } from './status-view';

const SHOWN: Record<string, string> = { '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/**
 * Text from the network (heartbeats, answers) made safe to print: every C0 control, DEL and C1 control (ESC
 * and CSI among them, which would move the cursor, clear the screen or set the window title) is written as a
 * visible escape (`\x1b`, `\t`, …). Everything else, other Unicode included, is printed as it is.
 */
export function visible(text: string): string {
  let shown = '';
  let from = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (!isControlCode(code)) continue;
    const c = text[i]!;
    shown += `${text.slice(from, i)}${SHOWN[c] ?? `\\x${code.toString(16).padStart(2, '0')}`}`;
    from = i + 1;
  }
  return from === 0 ? text : shown + text.slice(from);
}

/** C0 (U+0000–U+001F), DEL (U+007F) and C1 (U+0080–U+009F). */
export function isControlCode(code: number): boolean {
  return code <= 0x1f || (code >= 0x7f && code <= 0x9f);
}

/** Cursor home, then erase the screen: the next frame replaces the last one instead of scrolling. */
export const CLEAR_SCREEN = '\x1b[H\x1b[2J';

/** What to write for one frame: on a terminal it replaces the last frame; elsewhere frames follow each other. */
export function frameText(lines: readonly string[], terminal: boolean): string {
  return terminal ? `${CLEAR_SCREEN}${lines.join('\n')}\n` : `${lines.join('\n')}\n\n`;
}

export function formatRate(perS: number): string {
  if (perS === 0) return '0';
  if (perS < 1) return perS.toFixed(2);
  if (perS < 100) return perS.toFixed(1);
  return perS.toFixed(0);
}

export function formatMs(ms: number): string {
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 1000) return `${ms.toFixed(0)} ms`;
  return `${(ms / 1000).toFixed(2)} s`;
}

function formatQuantile(q: Quantile | undefined): string {
  if (!q) return '-';
  return q.above ? `>${formatMs(q.ms)}` : formatMs(q.ms);
}

function formatBytes(bytes: number): string {
  if (bytes >= 10 * 2 ** 30) return `${(bytes / 2 ** 30).toFixed(0)} GiB`;
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(1)} GiB`;
  return `${(bytes / 2 ** 20).toFixed(0)} MiB`;
}

export function formatDuration(seconds: number): string {
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, '0')}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor(s / 3600) % 24).padStart(2, '0')}h`;
}

/** `ok 47.0, overloaded 1.0`, busiest first. */
function formatCounts(perS: Record<string, number>): string {
  return Object.entries(perS)
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([key, value]) => `${key} ${formatRate(value)}`)
    .join(', ');
}

/**
 * Cells at their column stops; a cell too long for its column pushes the next one right by what it
 * overflows, and the columns after that take the slack back.
 */
function row(cells: ReadonlyArray<string>, widths: readonly number[]): string {
  let line = '';
  let stop = 0;
  cells.forEach((cell, index) => {
    line = index === 0 ? cell : `${line.length < stop ? line.padEnd(stop) : `${line} `}${cell}`;
    stop += widths[index] ?? 0;
  });
  return line.trimEnd();
}

function clip(line: string, width: number): string {
  return line.length <= width ? line : `${line.slice(0, width - 3)}...`;
}

const ALIAS_NAMES: Record<string, string> = { previous_stable: 'prev' };

function aliasText(model: ModelStatus): string {
  const order = ['stable', 'candidate', 'previous_stable'];
  return Object.entries(model.aliases)
    .sort((a, b) => (order.indexOf(a[0]) + 1 || 99) - (order.indexOf(b[0]) + 1 || 99))
    .map(([alias, version]) => `${ALIAS_NAMES[alias] ?? alias}=${version}`)
    .join(' ');
}

/** The second line under a model, when it has a rollout or errors to tell. */
function modelDetail(model: ModelStatus, device: string): string | undefined {
  const parts: string[] = [];
  if (model.canaryPercent > 0)
    parts.push(
      `canary ${model.canaryPercent}%${model.canaryObservedPercent === undefined ? '' : ` (${model.canaryObservedPercent.toFixed(1)}% observed)`}`,
    );
  if (model.shadow) {
    const agree = model.shadowAgree;
    parts.push(
      agree
        ? `shadow on, agree ${agree.percent.toFixed(1)}% of ${agree.compared} ${agree.since === 'window' ? 'in the window' : 'since start'}`
        : 'shadow on, nothing compared yet',
    );
  }
  const errors = Object.fromEntries(Object.entries(model.codesPerS).filter(([code]) => code !== 'ok'));
  if (Object.keys(errors).length > 0) parts.push(`errors/s: ${formatCounts(errors)}`);
  if (device !== 'auto' && model.provider !== '-' && !device.startsWith(model.provider))
    parts.push(`runs on ${model.provider}`);
  return parts.length > 0 ? `    ${parts.join('; ')}` : undefined;
}

const NODE_WIDTHS = [6, 13, 9, 9, 11, 6, 10, 7, 10, 8];
const MODEL_WIDTHS = [14, 28, 9, 8, 8, 10, 10, 7, 5];

/** The frame: header, nodes, models, legend; every line at most `width` columns. */
export function renderFrame(snapshot: StatusSnapshot, width = FRAME_WIDTH): string[] {
  const lines: string[] = [];
  const state = snapshot.status === 'ok' ? 'ok' : `${snapshot.status}, NOT READY`;
  const uptime = snapshot.uptimeS === undefined ? '' : `, up ${formatDuration(snapshot.uptimeS)}`;
  lines.push(
    `streaminfer ${snapshot.url} ${snapshot.time.slice(11, 19)} UTC: ${state}, epoch ${snapshot.epoch}${uptime}, device ${snapshot.device}`,
  );
  const codes = formatCounts(snapshot.codesPerS);
  const shed = formatCounts(snapshot.shedByReasonPerS);
  lines.push(
    `requests over the last ${snapshot.windowS.toFixed(1)} s: ${formatRate(snapshot.requestsPerS)}/s${codes ? ` (${codes})` : ''}`,
  );
  lines.push(
    `shed: ${formatRate(snapshot.shedPerS)}/s${shed ? ` (${shed})` : ''}, ${snapshot.shedSinceStart} since start; ` +
      `WebSocket connections: ${snapshot.wsConnections}`,
  );
  const reload = snapshot.lastReload;
  const failed = snapshot.reloadsFailed > 0 ? `; ${snapshot.reloadsFailed} failed since start` : '';
  if (!reload) lines.push(`no reload since start${failed}`);
  else {
    const ago = reload.ageS === undefined ? '' : `, ${formatDuration(reload.ageS)} ago`;
    const outcome = reload.result === 'failed' ? 'FAILED' : reload.result;
    const why = reload.error ? `: ${reload.error}` : '';
    lines.push(
      `last reload #${reload.id}: ${outcome} (${reload.strategy}), epoch ${reload.epochBefore} -> ${reload.epoch} in ${reload.durationMs} ms${ago}${failed}${why}`,
    );
  }
  lines.push('');
  lines.push(
    row(
      ['NODE', 'STATE', 'PID', 'WORKERS', 'IN FLIGHT', 'WS', 'LAG p99', 'CPU', 'RSS', 'RESTARTS'],
      NODE_WIDTHS,
    ),
  );
  for (const node of snapshot.nodes) {
    const show = (value: number | undefined, format: (v: number) => string = String): string =>
      value === undefined ? '-' : format(value);
    lines.push(
      row(
        [
          String(node.node),
          node.state,
          show(node.pid),
          node.workers === undefined ? '-' : `${node.workersReady}/${node.workers}`,
          show(node.inflight),
          show(node.wsConnections),
          show(node.lagP99Ms, formatMs),
          show(node.cpuPercent, (v) => `${v.toFixed(0)}%`),
          show(node.rssBytes, formatBytes),
          show(node.restarts),
        ],
        NODE_WIDTHS,
      ),
    );
  }
  if (snapshot.supervisorLagP99Ms !== undefined)
    lines.push(`supervisor event-loop lag p99 ${formatMs(snapshot.supervisorLagP99Ms)}`);
  lines.push('');
  lines.push(
    row(['MODEL', 'ALIASES', 'REQ/S', 'ERR/S', 'SHED/S', 'P50', 'P99', 'INFL', 'QUEUE'], MODEL_WIDTHS),
  );
  for (const model of snapshot.models) {
    const errors = Object.entries(model.codesPerS)
      .filter(([code]) => code !== 'ok')
      .reduce((sum, [, perS]) => sum + perS, 0);
    lines.push(
      row(
        [
          `${model.name}${model.isDefault ? ' *' : ''}`,
          aliasText(model),
          formatRate(model.requestsPerS),
          formatRate(errors),
          formatRate(model.shedPerS),
          formatQuantile(model.p50),
          formatQuantile(model.p99),
          String(model.inflight),
          String(model.queued),
        ],
        MODEL_WIDTHS,
      ),
    );
    const detail = modelDetail(model, snapshot.device);
    if (detail) lines.push(detail);
  }
  lines.push('');
  lines.push('* default model. Rates, P50/P99 (request latency) and CPU: over the window; the rest: now.');
  // Names, versions and messages come from the server: no terminal escape in them gets through.
  return lines.map((line) => clip(visible(line), width));
}
