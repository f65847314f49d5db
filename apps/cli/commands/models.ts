/**
 * `streaminfer models list|deploy|canary|shadow|promote|rollback`: the registry of a running server, through the
 * admin API. `models push`, `keygen` and `rollout` are their own files.
 */
import type { Command } from 'commander';
import { type ClientFlags, type CommandKit, printRefusal, runAdmin } from '../command-kit';

interface ModelListing {
  default_model: string;
  models: Array<{
    name: string;
    default_version: string;
    aliases?: Record<string, string>;
    canary_percent?: number;
    shadow?: boolean;
    versions: Array<{ version: string; execution_provider: string }>;
  }>;
}

/** The answer of a registry action: the reload it caused and the model's routes after it. */
interface RegistryAnswer {
  epoch?: number;
  duration_ms?: number;
  code?: string;
  message?: string;
  model?: Record<string, unknown>;
}

/** Runs one registry action and prints its outcome. */
function registryCommand(
  flags: ClientFlags,
  name: string,
  action: string,
  body: Record<string, unknown>,
): Promise<void> {
  return runAdmin<RegistryAnswer>(
    flags,
    'POST',
    `/api/models/${encodeURIComponent(name)}/${action}`,
    body,
    (result, status) => {
      if (status !== 200) {
        printRefusal(action, status, result);
        return;
      }
      const model = result.model ?? {};
      console.log(
        `${name}: stable=${model.stable} candidate=${model.candidate ?? '-'} previous=${model.previous_stable ?? '-'} canary=${model.canary_percent}% shadow=${model.shadow ? 'on' : 'off'} (epoch ${result.epoch}, ${result.duration_ms} ms)`,
      );
    },
    true,
  );
}

/** Adds `models` and its registry subcommands; returns it for the commands registered beside them. */
export function registerModels(program: Command, kit: CommandKit): Command {
  const { addClientOptions, fail } = kit;
  const models = program
    .command('models')
    .description('inspect and roll out model versions on a running server');
  addClientOptions(
    models.command('list').description('models, loaded versions, aliases, canary and shadow'),
  ).action((flags: ClientFlags) =>
    runAdmin<ModelListing>(flags, 'GET', '/api/models', undefined, (list, status) => {
      if (status !== 200) {
        console.log(JSON.stringify(list, null, 2));
        return;
      }
      for (const model of list.models) {
        const mark = model.name === list.default_model ? ' (default model)' : '';
        const aliases = Object.entries(model.aliases ?? { stable: model.default_version })
          .map(([alias, version]) => `${alias}=${version}`)
          .join(' ');
        const extras = [
          model.canary_percent ? `canary ${model.canary_percent}%` : '',
          model.shadow ? 'shadow on' : '',
        ]
          .filter(Boolean)
          .join(', ');
        console.log(
          `${model.name}${mark}: ${aliases}; loaded ${model.versions.map((v) => v.version).join(', ')} on ${model.versions[0]?.execution_provider}${extras ? `; ${extras}` : ''}`,
        );
      }
    }),
  );
  addClientOptions(
    models.command('deploy <name> <version>').description('load a version beside stable as the candidate'),
  ).action((name: string, version: string, flags: ClientFlags) =>
    registryCommand(flags, name, 'candidate', { version }),
  );
  addClientOptions(
    models
      .command('canary <name> <percent>')
      .description('send this % of unpinned requests to the candidate'),
  ).action((name: string, percent: string, flags: ClientFlags) => {
    const value = Number(percent);
    if (!Number.isFinite(value)) fail('percent must be a number from 0 to 100');
    return registryCommand(flags, name, 'canary', { percent: value });
  });
  addClientOptions(
    models
      .command('shadow <name> <on|off>')
      .description('mirror stable traffic to the candidate and compare'),
  ).action((name: string, state: string, flags: ClientFlags) => {
    if (state !== 'on' && state !== 'off') fail('shadow takes on or off');
    return registryCommand(flags, name, 'shadow', { enabled: state === 'on' });
  });
  addClientOptions(
    models
      .command('promote <name>')
      .description('the candidate becomes stable (the old stable stays loaded for rollback)'),
  ).action((name: string, flags: ClientFlags) => registryCommand(flags, name, 'promote', {}));
  addClientOptions(
    models.command('rollback <name>').description('stable goes back to the previous stable, instantly'),
  ).action((name: string, flags: ClientFlags) => registryCommand(flags, name, 'rollback', {}));
  return models;
}
