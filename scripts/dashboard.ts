/** Writes deploy/grafana/streaminfer.json from deploy/grafana/dashboard.ts (`npm run dashboard`). */
import { writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { dashboardJson } from '../deploy/grafana/dashboard';

const target = path.resolve(__dirname, '../../deploy/grafana/streaminfer.json');
writeFileSync(target, dashboardJson());
console.log(`wrote ${path.relative(process.cwd(), target)}`);
