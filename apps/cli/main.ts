#!/usr/bin/env node
/** `streaminfer` command line: serve, status, reload, models, fleet, bench, simulate, stream (one file each in commands/). */
import { Command } from 'commander';
import { commandKit, fail } from './command-kit';
import { registerBench } from './commands/bench-model';
import { registerFleet } from './commands/fleet';
import { registerModels } from './commands/models';
import { registerModelsKeygen } from './commands/models-keygen';
import { registerModelsPush } from './commands/models-push';
import { registerReload } from './commands/reload';
import { registerRollout } from './commands/rollout';
import { registerServe } from './commands/serve';
import { registerSimulate } from './commands/simulate';
import { registerStatus } from './commands/status';
import { registerStream } from './commands/stream';

const program = new Command();
program
  .name('streaminfer')
  .description('Real-time ML inference server: WebSocket streaming, batching, backpressure, hot-swap.')
  .showHelpAfterError();

registerServe(program, fail);
registerStatus(program, commandKit);
registerReload(program, commandKit);
const models = registerModels(program, commandKit);
registerModelsPush(models, fail);
registerModelsKeygen(models, fail);
registerRollout(models, commandKit);
registerFleet(program, commandKit);
registerBench(program, fail);
registerSimulate(program, fail);
registerStream(program, fail);

program.parseAsync(process.argv).catch((error: Error) => fail(error.message));
