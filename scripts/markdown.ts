/**
 * Markdown tables and the number format their cells use: one renderer for the bench reports (loadtest/)
 * and the generated model READMEs (scripts/models/). Here rather than in loadtest/ because scripts may not
 * import loadtest.
 */

/** Escape text for a Markdown table cell (pipes, newlines, backslashes before pipes). */
export function escapeCell(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\|/g, '\\|').replace(/\r?\n/g, '<br>');
}

export type Align = 'left' | 'right' | 'center';

export interface TableOptions {
  /** per column; default: right for columns of numbers only, left for the rest */
  align?: Align[];
  /**
   * Pad every cell to its column's width (at least 3), separator dashes as wide: a table that reads as
   * plain text too (the generated READMEs). Default: no padding (the bench reports).
   */
  pad?: boolean;
}

/** `left` left-aligned columns, then `right` right-aligned ones (a label or two, then figures). */
export function leftThenRight(left: number, right: number): Align[] {
  return [...Array<Align>(left).fill('left'), ...Array<Align>(right).fill('right')];
}

/** Number formatting for tables: integers with thin grouping, others with 3 significant digits. */
export function fmt(v: number | undefined, digits = 3): string {
  if (v === undefined || Number.isNaN(v)) return '–';
  if (!Number.isFinite(v)) return v > 0 ? '∞' : '-∞';
  if (Number.isInteger(v)) return v.toLocaleString('en-US');
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString('en-US');
  return String(Number(v.toPrecision(digits)));
}

/**
 * GitHub-flavoured Markdown table, lines joined by `\n`; numbers are formatted with `fmt` and right-aligned
 * unless `align` says otherwise. The third argument is the alignments or the options.
 */
export function markdownTable(
  headers: string[],
  rows: (string | number)[][],
  options?: Align[] | TableOptions,
): string {
  const o: TableOptions = Array.isArray(options) ? { align: options } : (options ?? {});
  const al: Align[] =
    o.align ??
    headers.map((_, c) =>
      rows.length > 0 && rows.every((r) => typeof r[c] === 'number') ? 'right' : 'left',
    );
  const cell = (v: string | number | undefined): string =>
    v === undefined ? '' : typeof v === 'number' ? fmt(v) : escapeCell(v);
  const head = headers.map(escapeCell);
  const body = rows.map((r) => headers.map((_, i) => cell(r[i])));
  // code points, not UTF-16 units: '–' and '×' are one column wide
  const len = (s: string): number => [...s].length;
  const widths = head.map((h, c) => Math.max(3, len(h), ...body.map((r) => len(r[c]!))));
  const padded = (s: string, c: number): string => (o.pad ? s + ' '.repeat(widths[c]! - len(s)) : s);
  // padded: the separator as wide as its column; unpadded: `---`, `---:`, `:---:`
  const sep = (a: Align | undefined, w: number): string => {
    if (a === 'right') return o.pad ? `${'-'.repeat(w - 1)}:` : '---:';
    if (a === 'center') return o.pad ? `:${'-'.repeat(w - 2)}:` : ':---:';
    return o.pad ? '-'.repeat(w) : '---';
  };
  const line = (cells: string[]): string => `| ${cells.map(padded).join(' | ')} |`;
  return [
    line(head),
    `| ${head.map((_, i) => sep(al[i], widths[i]!)).join(' | ')} |`,
    ...body.map(line),
  ].join('\n');
}
