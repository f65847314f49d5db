/**
 * Dependency-free SVG charts for the bench report: a bar chart (one bar per run, e.g.
 * throughput or p99) and a line chart (timelines: throughput or version share over time).
 * Output is standalone SVG 1.1 text; every piece of caller text is XML-escaped.
 */

export const PALETTE = [
  '#4e79a7',
  '#f28e2b',
  '#e15759',
  '#76b7b2',
  '#59a14f',
  '#edc948',
  '#b07aa1',
  '#ff9da7',
];

export function escapeXml(s: string): string {
  // drop characters XML 1.0 forbids, then escape the five specials
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping control characters is the point
  const clean = s.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, '');
  return clean
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

/** Compact number: 1234 → "1.23k", 0.0123 → "0.0123", 12 → "12". */
export function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return 'n/a';
  const a = Math.abs(v);
  if (a >= 1e9) return trim(v / 1e9) + 'G';
  if (a >= 1e6) return trim(v / 1e6) + 'M';
  if (a >= 1e4) return trim(v / 1e3) + 'k';
  if (a >= 100) return String(Math.round(v));
  if (a === 0) return '0';
  return String(Number(v.toPrecision(3)));
}

function trim(v: number): string {
  return String(Number(v.toPrecision(3)));
}

/** "Nice" axis ticks covering [min, max] (1/2/5 × 10^k steps). */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (max < min) [min, max] = [max, min];
  if (max === min) {
    if (max === 0) return [0, 1];
    min = Math.min(0, min);
    max = Math.max(max, 0);
    if (max === min) max = min + 1;
  }
  const raw = (max - min) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  const start = Math.floor(min / step) * step;
  const ticks: number[] = [];
  for (let t = start; t < max + step * 0.999; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

const f = (n: number): string => String(Math.round(n * 10) / 10);

function frame(width: number, height: number, title: string, body: string[]): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="${f(width / 2)}" y="20" text-anchor="middle" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
    ...body,
    '</svg>',
    '',
  ].join('\n');
}

export interface Bar {
  label: string;
  value: number;
  color?: string;
}

export interface BarChartSpec {
  title: string;
  /** axis unit, e.g. "req/s" or "ms" */
  unit?: string;
  bars: Bar[];
  width?: number;
  height?: number;
}

/** Vertical bar chart with value labels; non-finite values are drawn as empty "n/a" bars. */
export function barChart(spec: BarChartSpec): string {
  const width = spec.width ?? Math.max(360, 120 + spec.bars.length * 110);
  const height = spec.height ?? 300;
  const m = { left: 64, right: 16, top: 36, bottom: 48 };
  const pw = width - m.left - m.right;
  const ph = height - m.top - m.bottom;
  const values = spec.bars.map((b) => (Number.isFinite(b.value) ? Math.max(0, b.value) : 0));
  const ticks = niceTicks(0, Math.max(0, ...values), 5);
  const top = ticks.at(-1) ?? 1;
  const y = (v: number): number => m.top + ph - (v / top) * ph;
  const body: string[] = [];
  for (const t of ticks) {
    body.push(
      `<line x1="${m.left}" y1="${f(y(t))}" x2="${m.left + pw}" y2="${f(y(t))}" stroke="#e0e0e0"/>`,
      `<text x="${m.left - 6}" y="${f(y(t) + 4)}" text-anchor="end" fill="#555">${escapeXml(formatNumber(t))}</text>`,
    );
  }
  if (spec.unit) {
    body.push(
      `<text transform="translate(14 ${f(m.top + ph / 2)}) rotate(-90)" text-anchor="middle" fill="#555">${escapeXml(spec.unit)}</text>`,
    );
  }
  const n = Math.max(1, spec.bars.length);
  const slot = pw / n;
  const bw = Math.min(80, slot * 0.6);
  spec.bars.forEach((b, i) => {
    const v = values[i]!;
    const x = m.left + slot * i + (slot - bw) / 2;
    const color = b.color ?? PALETTE[i % PALETTE.length]!;
    const finite = Number.isFinite(b.value);
    body.push(
      `<rect x="${f(x)}" y="${f(y(v))}" width="${f(bw)}" height="${f(m.top + ph - y(v))}" fill="${escapeXml(color)}"${finite ? '' : ' fill-opacity="0.2"'}>` +
        `<title>${escapeXml(`${b.label}: ${finite ? formatNumber(b.value) : 'n/a'}${spec.unit ? ' ' + spec.unit : ''}`)}</title></rect>`,
      `<text x="${f(x + bw / 2)}" y="${f(y(v) - 5)}" text-anchor="middle">${escapeXml(finite ? formatNumber(b.value) : 'n/a')}</text>`,
      `<text x="${f(m.left + slot * i + slot / 2)}" y="${f(m.top + ph + 18)}" text-anchor="middle">${escapeXml(b.label)}</text>`,
    );
  });
  body.push(`<line x1="${m.left}" y1="${m.top + ph}" x2="${m.left + pw}" y2="${m.top + ph}" stroke="#333"/>`);
  return frame(width, height, spec.title, body);
}

export interface LineSeries {
  name: string;
  /** [x, y] points; non-finite points are skipped */
  points: [number, number][];
  color?: string;
}

export interface LineChartSpec {
  title: string;
  xLabel?: string;
  yLabel?: string;
  series: LineSeries[];
  width?: number;
  height?: number;
  /** vertical markers, e.g. "reload" at x = 12.5 */
  markers?: { x: number; label: string }[];
}

/** Multi-series line chart with a legend (timelines). */
export function lineChart(spec: LineChartSpec): string {
  const width = spec.width ?? 720;
  const height = spec.height ?? 320;
  const m = { left: 64, right: 140, top: 36, bottom: 44 };
  const pw = width - m.left - m.right;
  const ph = height - m.top - m.bottom;
  const pts = spec.series.flatMap((s) =>
    s.points.filter(([a, b]) => Number.isFinite(a) && Number.isFinite(b)),
  );
  const xs = pts.map((p) => p[0]).concat((spec.markers ?? []).map((mk) => mk.x));
  const ysv = pts.map((p) => p[1]);
  const xMin = xs.length ? Math.min(...xs) : 0;
  const xMax = xs.length ? Math.max(...xs) : 1;
  const xTicks = niceTicks(xMin, xMax === xMin ? xMin + 1 : xMax, 6);
  const yTicks = niceTicks(Math.min(0, ...ysv), Math.max(0, ...ysv), 5);
  const x0 = xTicks[0] ?? 0;
  const x1 = xTicks.at(-1) ?? 1;
  const y0 = yTicks[0] ?? 0;
  const y1 = yTicks.at(-1) ?? 1;
  const X = (v: number): number => m.left + ((v - x0) / (x1 - x0 || 1)) * pw;
  const Y = (v: number): number => m.top + ph - ((v - y0) / (y1 - y0 || 1)) * ph;
  const body: string[] = [];
  for (const t of yTicks) {
    body.push(
      `<line x1="${m.left}" y1="${f(Y(t))}" x2="${m.left + pw}" y2="${f(Y(t))}" stroke="#e0e0e0"/>`,
      `<text x="${m.left - 6}" y="${f(Y(t) + 4)}" text-anchor="end" fill="#555">${escapeXml(formatNumber(t))}</text>`,
    );
  }
  for (const t of xTicks) {
    body.push(
      `<line x1="${f(X(t))}" y1="${m.top + ph}" x2="${f(X(t))}" y2="${m.top + ph + 4}" stroke="#333"/>`,
      `<text x="${f(X(t))}" y="${m.top + ph + 17}" text-anchor="middle" fill="#555">${escapeXml(formatNumber(t))}</text>`,
    );
  }
  body.push(
    `<line x1="${m.left}" y1="${m.top + ph}" x2="${m.left + pw}" y2="${m.top + ph}" stroke="#333"/>`,
    `<line x1="${m.left}" y1="${m.top}" x2="${m.left}" y2="${m.top + ph}" stroke="#333"/>`,
  );
  if (spec.xLabel) {
    body.push(
      `<text x="${f(m.left + pw / 2)}" y="${height - 8}" text-anchor="middle" fill="#555">${escapeXml(spec.xLabel)}</text>`,
    );
  }
  if (spec.yLabel) {
    body.push(
      `<text transform="translate(14 ${f(m.top + ph / 2)}) rotate(-90)" text-anchor="middle" fill="#555">${escapeXml(spec.yLabel)}</text>`,
    );
  }
  for (const mk of spec.markers ?? []) {
    body.push(
      `<line x1="${f(X(mk.x))}" y1="${m.top}" x2="${f(X(mk.x))}" y2="${m.top + ph}" stroke="#999" stroke-dasharray="4 3"/>`,
      `<text x="${f(X(mk.x) + 3)}" y="${m.top + 10}" fill="#555" font-size="10">${escapeXml(mk.label)}</text>`,
    );
  }
  spec.series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]!;
    const good = s.points.filter(([a, b]) => Number.isFinite(a) && Number.isFinite(b));
    if (good.length === 1) {
      const [a, b] = good[0]!;
      body.push(`<circle cx="${f(X(a))}" cy="${f(Y(b))}" r="3" fill="${escapeXml(color)}"/>`);
    } else if (good.length > 1) {
      const d = good.map(([a, b]) => `${f(X(a))},${f(Y(b))}`).join(' ');
      body.push(`<polyline fill="none" stroke="${escapeXml(color)}" stroke-width="2" points="${d}"/>`);
    }
    const ly = m.top + 8 + i * 18;
    body.push(
      `<rect x="${m.left + pw + 12}" y="${ly - 8}" width="12" height="12" fill="${escapeXml(color)}"/>`,
      `<text x="${m.left + pw + 30}" y="${ly + 2}">${escapeXml(s.name)}</text>`,
    );
  });
  return frame(width, height, spec.title, body);
}
