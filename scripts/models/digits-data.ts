/**
 * The handwritten-digits data set (`digits.csv.gz`, 1,797 rows of 64 pixel counts 0..16
 * followed by the label 0..9) and its deterministic train / held-out split.
 */
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { gunzipSync } from 'node:zlib';

export const N_PIXELS = 64;
export const N_CLASSES = 10;

export interface Digits {
  /** Row-major [n, 64], raw pixel counts 0..16 exactly as in the file. */
  pixels: Float64Array;
  labels: Int32Array;
  n: number;
}

/** Where the data lives inside the repository (data/README.md has its source and licence). */
export const DIGITS_DATA_FILE = 'data/digits.csv.gz';

/** The digits data of the repository rooted at `repoRoot`. */
export function digitsDataPath(repoRoot: string): string {
  return path.join(repoRoot, DIGITS_DATA_FILE);
}

/** Every 5th row (index % 5 === 4) is held out; the rest is the training set. */
export function isHeldOut(index: number): boolean {
  return index % 5 === 4;
}

export function parseDigits(csv: string): Digits {
  const lines = csv.split('\n').filter((l) => l.trim() !== '');
  const n = lines.length;
  const pixels = new Float64Array(n * N_PIXELS);
  const labels = new Int32Array(n);
  lines.forEach((line, r) => {
    const cells = line.split(',');
    if (cells.length !== N_PIXELS + 1) {
      throw new Error(`digits row ${r + 1}: expected ${N_PIXELS + 1} values, got ${cells.length}`);
    }
    for (let c = 0; c <= N_PIXELS; c++) {
      const v = Number(cells[c]);
      const max = c < N_PIXELS ? 16 : N_CLASSES - 1;
      if (!Number.isInteger(v) || v < 0 || v > max) {
        throw new Error(`digits row ${r + 1}, column ${c + 1}: bad value ${JSON.stringify(cells[c])}`);
      }
      if (c < N_PIXELS) pixels[r * N_PIXELS + c] = v;
      else labels[r] = v;
    }
  });
  return { pixels, labels, n };
}

/** Reads and parses `digits.csv.gz` (or a plain `.csv` of the same rows); fails with a message that names the path when it is missing. */
export function loadDigits(file: string): Digits {
  if (!existsSync(file)) {
    throw new Error(
      `digits data not found at ${file} — the repository ships it as ${DIGITS_DATA_FILE} (see data/README.md)`,
    );
  }
  const raw = readFileSync(file);
  return parseDigits((file.endsWith('.gz') ? gunzipSync(raw) : raw).toString('utf8'));
}

/** Selects rows by index into a new Digits. */
export function subset(d: Digits, rows: readonly number[]): Digits {
  const pixels = new Float64Array(rows.length * N_PIXELS);
  const labels = new Int32Array(rows.length);
  rows.forEach((r, i) => {
    pixels.set(d.pixels.subarray(r * N_PIXELS, (r + 1) * N_PIXELS), i * N_PIXELS);
    labels[i] = d.labels[r]!;
  });
  return { pixels, labels, n: rows.length };
}

export function split(d: Digits): { train: Digits; heldOut: Digits } {
  const train: number[] = [];
  const held: number[] = [];
  for (let i = 0; i < d.n; i++) (isHeldOut(i) ? held : train).push(i);
  return { train: subset(d, train), heldOut: subset(d, held) };
}
