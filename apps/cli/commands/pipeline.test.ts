import { Command } from 'commander';
import { type PipelineAction, registerPipeline, STREAM_DEPRECATED } from './pipeline';

function fail(message: string): never {
  throw new Error(message);
}

/** A fresh program per parse (commander keeps option values on the command), its action recorded. */
function cli(): { program: Command; runs: unknown[] } {
  const runs: unknown[] = [];
  const action: PipelineAction = async (flags) => {
    runs.push(flags);
  };
  const program = new Command().name('streaminfer').exitOverride();
  registerPipeline(program, fail, action);
  return { program, runs };
}

/** Runs `streaminfer <argv>` with the recorded action; returns what it ran with and what went to stderr. */
async function run(argv: string[]): Promise<{ runs: unknown[]; stderr: string }> {
  const { program, runs } = cli();
  let stderr = '';
  const spy = jest.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  try {
    await program.parseAsync(argv, { from: 'user' });
  } finally {
    spy.mockRestore();
  }
  return { runs, stderr };
}

describe('streaminfer pipeline, and stream as its deprecated alias', () => {
  const argv = ['--config', 'p.json', '--mode', 'external', '--url', 'ws://h:8000/ws', '--admin-port', '0'];

  it('both names run the same action with the same flags', async () => {
    const pipeline = await run(['pipeline', ...argv]);
    const stream = await run(['stream', ...argv]);
    expect(pipeline.runs).toEqual([
      { config: 'p.json', mode: 'external', url: 'ws://h:8000/ws', adminPort: '0' },
    ]);
    expect(stream.runs).toEqual(pipeline.runs);
  });

  it('only the alias prints the notice: one line on stderr', async () => {
    expect((await run(['pipeline', ...argv])).stderr).toBe('');
    expect((await run(['stream', ...argv])).stderr).toBe(`${STREAM_DEPRECATED}\n`);
    expect(STREAM_DEPRECATED).toBe('`streaminfer stream` is deprecated; use `streaminfer pipeline`');
  });

  it('the alias notice comes before a subcommand too: stream recover', async () => {
    // `--partition x` fails in the action (this test's fail throws), after the hook and before any request.
    const recover = ['recover', '--partition', 'x', '--from', 'previous'];
    await expect(run(['pipeline', ...recover])).rejects.toThrow('--partition must be a partition number');
    let stderr = '';
    const spy = jest.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      stderr += String(chunk);
      return true;
    });
    try {
      await expect(cli().program.parseAsync(['stream', ...recover], { from: 'user' })).rejects.toThrow(
        '--partition must be a partition number',
      );
    } finally {
      spy.mockRestore();
    }
    expect(stderr).toBe(`${STREAM_DEPRECATED}\n`);
  });

  it('both names have the same options and the recover subcommand', () => {
    const { program } = cli();
    const byName = (name: string) => program.commands.find((c) => c.name() === name)!;
    const shape = (c: Command) => ({
      options: c.options.map((o) => o.flags),
      subcommands: c.commands.map((s) => [s.name(), s.options.map((o) => o.flags)]),
    });
    expect(shape(byName('stream'))).toEqual(shape(byName('pipeline')));
    expect(shape(byName('pipeline')).subcommands.map(([name]) => name)).toEqual(['recover']);
  });

  it('--help lists pipeline and not the alias', () => {
    const help = cli().program.helpInformation();
    expect(help).toMatch(/^\s+pipeline \[options\]/m);
    expect(help).not.toMatch(/^\s+stream\b/m);
  });
});
