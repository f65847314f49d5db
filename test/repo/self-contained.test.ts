/** A user's clone has nothing beside it: no source, test or script may read outside the repository. */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { digitsDataPath, loadDigits } from '../../scripts/models/digits-data';

const REPO_ROOT = path.resolve(__dirname, '../../..');
const SOURCE_DIRS = ['apps', 'libs', 'scripts', 'loadtest', 'test'];
/** A path that climbs out of the repository to a sibling checkout. */
const OUTSIDE = /\.\.\/(?:\.\.\/)*shared\b/;

function sources(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const file = path.join(dir, name);
    if (statSync(file).isDirectory()) sources(file, out);
    else if (/\.(ts|js|json|sh)$/.test(name)) out.push(file);
  }
  return out;
}

describe('the repository is self-sufficient', () => {
  it('no source file names a path outside the repository', () => {
    const offenders: string[] = [];
    for (const dir of SOURCE_DIRS) {
      for (const file of sources(path.join(REPO_ROOT, dir))) {
        const text = readFileSync(file, 'utf8');
        text.split('\n').forEach((line, i) => {
          if (OUTSIDE.test(line) && !line.includes('OUTSIDE'))
            offenders.push(`${path.relative(REPO_ROOT, file)}:${i + 1}`);
        });
      }
    }
    expect(offenders).toEqual([]);
  });

  it('ships the digits data (1,797 rows) with its attribution', () => {
    const digits = loadDigits(digitsDataPath(REPO_ROOT));
    expect(digits.n).toBe(1797);
    const readme = readFileSync(path.join(REPO_ROOT, 'data/README.md'), 'utf8');
    expect(readme).toContain('CC BY 4.0');
    expect(readme).toContain('Alpaydin');
  });
});
