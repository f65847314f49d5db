/** `streaminfer fleet exclude <host>`: a fleet's membership, through the admin API. */
import type { Command } from 'commander';
import { type ClientFlags, type CommandKit, printRefusal, runAdmin } from '../command-kit';

export function registerFleet(program: Command, kit: CommandKit): void {
  const { addClientOptions } = kit;
  const fleet = program.command('fleet').description("a fleet's membership (hosts started with --cluster)");
  addClientOptions(
    fleet
      .command('exclude <host>')
      .description(
        'take a silent member out of the fleet: changes go on without it; back, it catches up and re-joins',
      ),
  ).action((host: string, flags: ClientFlags) =>
    runAdmin<{ fleet?: string; excluded?: string; revision?: number; members?: string[]; warning?: string }>(
      flags,
      'POST',
      `/api/fleet/hosts/${encodeURIComponent(host)}/exclude`,
      {},
      (answer, status) => {
        if (status !== 200) {
          printRefusal('exclude', status, answer as { code?: string; message?: string });
          return;
        }
        console.log(
          `fleet ${answer.fleet}: host ${answer.excluded} excluded (revision ${answer.revision}); members: ${answer.members?.join(', ')}`,
        );
        if (answer.warning) console.error(`warning: ${answer.warning}`);
      },
    ),
  );
}
