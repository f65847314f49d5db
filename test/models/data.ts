/** Locates the shared digits data and the committed model repository for the model tests. */
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { type Digits, loadDigits } from '../../scripts/models/digits-data';

/** Compiled to dist/test/models: the repository root is three levels up. */
export const REPO_ROOT = path.resolve(__dirname, '../../..');
export const MODELS_DIR = path.join(REPO_ROOT, 'models');
export const DIGITS_PATH = path.resolve(__dirname, '../../../../shared/data/digits.csv.gz');

export function digitsPath(): string {
  if (!existsSync(DIGITS_PATH)) {
    throw new Error(
      `digits data not found at ${DIGITS_PATH}: the model tests need the shared checkout's ` +
        'data/digits.csv.gz next to the repository (../shared/data/digits.csv.gz from the repo root)',
    );
  }
  return DIGITS_PATH;
}

let cached: Digits | undefined;
export function digits(): Digits {
  cached ??= loadDigits(digitsPath());
  return cached;
}

export function modelFile(name: string, version: string): string {
  return path.join(MODELS_DIR, name, version, 'model.onnx');
}
