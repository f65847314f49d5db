/**
 * A metric lint over Prometheus text exposition: the rules `promtool check metrics` applies that an exporter
 * can break (names, suffixes, units, HELP, duplicates, label names). It runs where promtool is not installed,
 * so CI checks /metrics on every host. Pure: text in, problems out ("name: problem", as promtool words them).
 */

type FamilyType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

interface Family {
  type?: FamilyType;
  help?: string;
  samples: number;
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const CAMEL_CASE = /[a-z][A-Z]/;
const TYPES = new Set<string>(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
/** Prometheus base units; a prefixed one (milliseconds, kilobytes) must be converted. */
const BASE_UNITS = [
  'amperes',
  'bytes',
  'celsius',
  'grams',
  'joules',
  'kelvin',
  'meters',
  'metres',
  'seconds',
  'volts',
];
const UNIT_PREFIXES = [
  'pico',
  'nano',
  'micro',
  'milli',
  'centi',
  'deci',
  'deca',
  'hecto',
  'kilo',
  'kibi',
  'mega',
  'mebi',
  'giga',
  'gibi',
  'tera',
  'tebi',
  'peta',
  'pebi',
];
const TIME_UNITS = ['minutes', 'hours', 'days', 'weeks'];
const ABBREVIATED_UNITS = new Set([
  's',
  'ms',
  'us',
  'ns',
  'sec',
  'b',
  'kb',
  'mb',
  'gb',
  'tb',
  'pb',
  'm',
  'h',
  'd',
]);
const SAMPLE_SUFFIXES: Record<string, readonly string[]> = {
  histogram: ['_bucket', '_sum', '_count', '_created'],
  summary: ['_sum', '_count', '_created'],
  counter: ['_created'],
};

/** Parses `{a="x",b="y\"z"}` into label pairs; undefined when malformed. */
function parseLabels(text: string): Array<[string, string]> | undefined {
  const labels: Array<[string, string]> = [];
  let i = 0;
  const skipSpaces = (): void => {
    while (text[i] === ' ') i++;
  };
  while (i < text.length) {
    skipSpaces();
    if (i >= text.length) break;
    const name = /^[^=\s]+/.exec(text.slice(i))?.[0];
    if (!name) return undefined;
    i += name.length;
    skipSpaces();
    if (text[i] !== '=' || text[i + 1] !== '"') return undefined;
    i += 2;
    let value = '';
    while (i < text.length && text[i] !== '"') {
      if (text[i] === '\\') {
        const next = text[i + 1];
        value += next === 'n' ? '\n' : (next ?? '');
        i += 2;
      } else value += text[i++];
    }
    if (text[i] !== '"') return undefined;
    i++;
    labels.push([name, value]);
    skipSpaces();
    if (text[i] === ',') i++;
    else if (i < text.length) return undefined;
  }
  return labels;
}

/** Splits a sample line into name, label text and value; undefined when malformed. */
function splitSample(line: string): { name: string; labels: string; value: string } | undefined {
  const brace = line.indexOf('{');
  const space = line.indexOf(' ');
  if (brace !== -1 && (space === -1 || brace < space)) {
    // The label block ends at the last '}' (label values may contain spaces and braces).
    const close = line.lastIndexOf('}');
    if (close < brace) return undefined;
    const rest = line
      .slice(close + 1)
      .trim()
      .split(/\s+/);
    return { name: line.slice(0, brace), labels: line.slice(brace + 1, close), value: rest[0] ?? '' };
  }
  const parts = line.trim().split(/\s+/);
  return parts.length >= 2 ? { name: parts[0]!, labels: '', value: parts[1]! } : undefined;
}

function familyOf(sampleName: string, families: Map<string, Family>): string | undefined {
  if (families.has(sampleName)) return sampleName;
  for (const [type, suffixes] of Object.entries(SAMPLE_SUFFIXES)) {
    for (const suffix of suffixes) {
      if (!sampleName.endsWith(suffix)) continue;
      const base = sampleName.slice(0, -suffix.length);
      if (families.get(base)?.type === type) return base;
    }
  }
  return undefined;
}

function nameProblems(name: string, family: Family): string[] {
  const problems: string[] = [];
  if (!METRIC_NAME.test(name)) problems.push('invalid metric name');
  if (name.includes(':')) problems.push('metric names should not contain ":" (reserved for recording rules)');
  if (CAMEL_CASE.test(name)) problems.push('metric names should be written in snake_case, not camelCase');
  if (family.type === undefined) problems.push('no TYPE line');
  if (family.help === undefined || family.help.trim() === '') problems.push('no help text');
  if (family.type === 'counter' && !name.endsWith('_total'))
    problems.push('counter metrics should have "_total" suffix');
  if (family.type !== 'counter' && name.endsWith('_total'))
    problems.push('non-counter metrics should not have "_total" suffix');
  for (const suffix of ['_bucket', '_count', '_sum'])
    if (name.endsWith(suffix)) problems.push(`metric names should not have "${suffix}" suffix`);
  const tokens = name.split('_');
  for (const token of tokens) {
    for (const unit of BASE_UNITS)
      for (const prefix of UNIT_PREFIXES)
        if (token === prefix + unit) problems.push(`use base unit "${unit}" instead of "${token}"`);
    if (TIME_UNITS.includes(token)) problems.push(`use base unit "seconds" instead of "${token}"`);
    if (ABBREVIATED_UNITS.has(token)) problems.push('metric names should not contain abbreviated units');
    if (family.type !== undefined && family.type !== 'untyped' && token === family.type)
      problems.push(`metric name should not include type '${family.type}'`);
  }
  return problems;
}

/** Every problem in an exposition text; empty when promtool would accept it. */
export function lintExposition(text: string): string[] {
  const problems: string[] = [];
  const families = new Map<string, Family>();
  const family = (name: string): Family => {
    let found = families.get(name);
    if (!found) {
      found = { samples: 0 };
      families.set(name, found);
    }
    return found;
  };
  const lines = text.split('\n');
  // Declarations first: a family's samples may only be named once its TYPE is known.
  for (const line of lines) {
    const meta = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s+(.*))?$/.exec(line);
    if (!meta) continue;
    const [, kind, name, rest = ''] = meta;
    const target = family(name!);
    if (kind === 'HELP') {
      if (target.help !== undefined) problems.push(`${name}: duplicate HELP (the family is declared twice)`);
      target.help = rest;
    } else {
      if (target.type !== undefined) problems.push(`${name}: duplicate TYPE (the family is declared twice)`);
      if (!TYPES.has(rest.trim())) problems.push(`${name}: unknown type "${rest.trim()}"`);
      else target.type = rest.trim() as FamilyType;
    }
  }
  const series = new Set<string>();
  for (const line of lines) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const sample = splitSample(line);
    if (!sample) {
      problems.push(`malformed sample line: ${line}`);
      continue;
    }
    const name = familyOf(sample.name, families) ?? sample.name;
    const owner = family(name);
    owner.samples++;
    const labels = parseLabels(sample.labels);
    if (!labels) {
      problems.push(`${sample.name}: malformed labels {${sample.labels}}`);
      continue;
    }
    // Go's ParseFloat: NaN and Inf in any case (prom-client writes "Nan").
    if (!/^([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|nan|[-+]?inf(inity)?)$/i.test(sample.value))
      problems.push(`${sample.name}: malformed value "${sample.value}"`);
    const seen = new Set<string>();
    for (const [label] of labels) {
      if (!LABEL_NAME.test(label) || label.startsWith('__'))
        problems.push(`${sample.name}: invalid label name "${label}"`);
      else if (CAMEL_CASE.test(label))
        problems.push(
          `${sample.name}: label names should be written in snake_case, not camelCase ("${label}")`,
        );
      if (seen.has(label)) problems.push(`${sample.name}: label "${label}" given twice`);
      seen.add(label);
    }
    const isBucket = owner.type === 'histogram' && sample.name === `${name}_bucket`;
    if (isBucket && !seen.has('le')) problems.push(`${sample.name}: histogram bucket without "le" label`);
    if (!isBucket && seen.has('le'))
      problems.push(`${sample.name}: non-histogram metrics should not have "le" label`);
    if (owner.type !== 'summary' && seen.has('quantile'))
      problems.push(`${sample.name}: non-summary metrics should not have "quantile" label`);
    const key = `${sample.name}{${labels
      .map(([label, value]) => `${label}=${JSON.stringify(value)}`)
      .sort()
      .join(',')}}`;
    if (series.has(key)) problems.push(`${sample.name}: duplicate series ${key}`);
    series.add(key);
  }
  for (const [name, entry] of families)
    for (const problem of nameProblems(name, entry)) problems.push(`${name} ${problem}`);
  return problems;
}
