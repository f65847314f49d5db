/**
 * "Done-when" checks of the `hot-swap` and `registry` scenarios: one figure judged against
 * its target, rendered as a Markdown table and a one-line note. A failed check is reported,
 * never thrown: it does not change the bench's exit status (that reflects runs that could
 * not be measured).
 */
import { markdownTable } from '../../scripts/markdown';

export interface Check {
  name: string;
  /** the target, as text (e.g. "≤ 2×") */
  target: string;
  /** the measured figure, formatted */
  measured: string;
  /** undefined when the figure could not be measured */
  pass: boolean | undefined;
  /** what was observed (counts, examples), especially when it fails */
  detail?: string;
}

export function checkText(pass: boolean | undefined): string {
  return pass === undefined ? 'n/a' : pass ? 'PASS' : 'FAIL';
}

export function checksMarkdown(checks: readonly Check[]): string {
  return markdownTable(
    ['figure', 'target', 'measured', 'verdict', 'detail'],
    checks.map((c) => [c.name, c.target, c.measured, checkText(c.pass), c.detail ?? '']),
    ['left', 'left', 'right', 'left', 'left'],
  );
}

/** "prefix: 5 PASS, 1 FAIL (name: measured vs target)". */
export function checksNote(prefix: string, checks: readonly Check[]): string {
  const count = (p: boolean | undefined): number => checks.filter((c) => c.pass === p).length;
  const failed = checks.filter((c) => c.pass !== true);
  return (
    `${prefix}: ${count(true)} PASS, ${count(false)} FAIL` +
    (count(undefined) ? `, ${count(undefined)} n/a` : '') +
    (failed.length
      ? ` — ${failed.map((c) => `${c.name}: ${c.measured} (target ${c.target}, ${checkText(c.pass)})`).join('; ')}`
      : '') +
    '.'
  );
}
