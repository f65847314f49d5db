import { mkdtempSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runCliToExit, startServer, WsClient } from './harness';

async function unnamedRequestModel(wsUrl: string): Promise<unknown> {
  const client = await WsClient.connect(wsUrl);
  const answer = await client.request({ id: 1, text: 'hi' });
  client.close();
  return answer.model;
}

describe('the default model survives a restart', () => {
  test('`reload --model upper`, restart on the same state directory: unnamed requests go to upper', async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-persist-'));
    const env = { STREAMINFER_STATE_DIR: stateDir };
    const first = await startServer({ models: ['echo', 'upper'], env });
    try {
      expect(await unnamedRequestModel(first.wsUrl)).toBe('echo');
      const reload = await runCliToExit(['reload', '--model', 'upper', '--url', first.adminUrl]);
      expect(reload.code).toBe(0);
      const saved = JSON.parse(readFileSync(path.join(stateDir, 'registry.json'), 'utf8')) as Record<
        string,
        unknown
      >;
      expect(saved).toMatchObject({ defaultModel: 'upper', configuredDefaultModel: 'echo' });
    } finally {
      await first.stop();
    }

    const second = await startServer({ models: ['echo', 'upper'], env });
    try {
      expect(await unnamedRequestModel(second.wsUrl)).toBe('upper');
      const health = (await (await fetch(`${second.url}/health`)).json()) as { default_model: string };
      expect(health.default_model).toBe('upper');
    } finally {
      await second.stop();
    }

    // The operator changing STREAMINFER_MODEL_NAME since the save wins over the saved default.
    const third = await startServer({ models: ['echo', 'upper'], env, args: ['--model', 'upper'] });
    await third.stop();
    const fourth = await startServer({ models: ['echo', 'upper'], env, args: ['--model', 'echo'] });
    try {
      expect(await unnamedRequestModel(fourth.wsUrl)).toBe('echo');
    } finally {
      await fourth.stop();
    }
  }, 60000);
});
