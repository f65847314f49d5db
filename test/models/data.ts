/** Locates the repository's digits data and the committed model repository for the model tests. */
import * as path from 'node:path';
import { type Digits, digitsDataPath, loadDigits } from '../../scripts/models/digits-data';

/** Compiled to dist/test/models: the repository root is three levels up. */
export const REPO_ROOT = path.resolve(__dirname, '../../..');
export const MODELS_DIR = path.join(REPO_ROOT, 'models');
export const DIGITS_PATH = digitsDataPath(REPO_ROOT);

export function digitsPath(): string {
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
