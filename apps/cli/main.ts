#!/usr/bin/env node
/** `streaminfer` command line: serve, status, reload, models, fleet, bench, simulate, pipeline (one file each in commands/). */
import { Command } from 'commander';
import { commandKit, fail } from './command-kit';
import { registerBench } from './commands/bench-model';
import { registerFleet } from './commands/fleet';
import { registerModels } from './commands/models';
import { registerModelsKeygen } from './commands/models-keygen';
import { registerModelsPush } from './commands/models-push';
import { registerPipeline } from './commands/pipeline';
import { registerReload } from './commands/reload';
import { registerRollout } from './commands/rollout';
import { registerServe } from './commands/serve';
import { registerSimulate } from './commands/simulate';
import { registerStatus } from './commands/status';

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
registerPipeline(program, fail);

program.parseAsync(process.argv).catch((error: Error) => fail(error.message));
