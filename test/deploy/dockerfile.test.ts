/**
 * No Docker engine here, so the image cannot be built: this reads deploy/Dockerfile's runtime stage and checks
 * what the server needs from it — a state directory the runtime user owns, kept on a volume.
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';

const DOCKERFILE = path.resolve(__dirname, '../../../deploy/Dockerfile');

function runtimeStage(): string[] {
  const lines = readFileSync(DOCKERFILE, 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.length > 0 && !line.startsWith('#'));
  const lastFrom = lines.map((line) => /^FROM\b/i.test(line)).lastIndexOf(true);
  return lines.slice(lastFrom);
}

test('the runtime image has a writable STREAMINFER_STATE_DIR owned by its user, on a volume', () => {
  const stage = runtimeStage();
  const env = stage.find((line) => /^ENV\b/.test(line) && line.includes('STREAMINFER_STATE_DIR='));
  const stateDir = /STREAMINFER_STATE_DIR=(\S+)/.exec(env ?? '')?.[1];
  expect(stateDir).toMatch(/^\/.+/);
  const userIndex = stage.findIndex((line) => /^USER\s/.test(line));
  expect(userIndex).toBeGreaterThan(-1);
  const user = stage[userIndex]!.split(/\s+/)[1]!.split(':')[0]!;
  // Created and chowned to the runtime user before the image switches to it.
  const setup = stage.slice(0, userIndex).filter((line) => /^RUN\b/.test(line));
  expect(setup.some((line) => line.includes(`mkdir -p ${stateDir}`))).toBe(true);
  expect(setup.some((line) => new RegExp(`chown ${user}(:\\S+)? ${stateDir}\\b`).test(line))).toBe(true);
  expect(stage.some((line) => /^VOLUME\b/.test(line) && line.includes(stateDir!))).toBe(true);
});
