/**
 * The committed delay-risk model (models/delay-risk): loads in onnxruntime-node, computes the
 * same P(late) as the training code, reproduces byte-for-byte from the build script, reaches
 * the stated held-out AUC, and the server serves it.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import * as ort from 'onnxruntime-node';
import { computeFeatures, FEATURE_NAMES, featureVector, N_FEATURES, simulate } from '../../libs/delivery';
import { serializeConfig } from '../../scripts/models/config';
import { auc, DELAY_RISK_CONFIG, MIN_HELD_OUT_AUC } from '../../scripts/models/delay-risk';
import { postJson, type ServerHandle, startServer, WsClient } from '../integration/harness';
import { MODELS_DIR, modelFile, REPO_ROOT } from './data';

let session: ort.InferenceSession;
beforeAll(async () => {
  session = await ort.InferenceSession.create(modelFile('delay-risk', '1'), { intraOpNumThreads: 1 });
});
afterAll(async () => {
  await session.release();
});

async function risk(rows: number[][]): Promise<Float32Array> {
  const out = await session.run({
    features: new ort.Tensor('float32', Float32Array.from(rows.flat()), [rows.length, N_FEATURES]),
  });
  expect(out['risk']!.dims).toEqual([rows.length, 1]);
  return out['risk']!.data as Float32Array;
}

describe('delay-risk model', () => {
  it('config.json is the build script config; input order is FEATURE_NAMES', () => {
    expect(readFileSync(path.join(MODELS_DIR, 'delay-risk', 'config.json'), 'utf8')).toBe(
      serializeConfig(DELAY_RISK_CONFIG),
    );
    expect(DELAY_RISK_CONFIG.description).toContain(`[${FEATURE_NAMES.join(', ')}]`);
    expect(session.inputNames).toEqual(['features']);
    expect(session.outputNames).toEqual(['risk']);
  });

  it('gives probabilities that rise with lateness signals, and the same answer alone and in a batch', async () => {
    // [speed_5m_kmh, distance_remaining_km, stops, traffic_alerts_10m, minutes_to_promised]
    const onTime = [25, 1, 0, 0, 20];
    const tight = [12, 4, 3, 2, 5];
    const overdue = [10, 3, 4, 3, -5];
    const r = await risk([onTime, tight, overdue]);
    for (const p of r) expect(p >= 0 && p <= 1).toBe(true);
    expect(r[0]!).toBeLessThan(0.2);
    expect(r[2]!).toBeGreaterThan(0.8);
    expect(r[0]!).toBeLessThan(r[1]!);
    expect(r[1]!).toBeLessThan(r[2]!);
    expect((await risk([tight]))[0]).toBeCloseTo(r[1]!, 6);
  });

  it(`separates late from on-time deliveries of a fresh simulator run (AUC ≥ ${MIN_HELD_OUT_AUC})`, async () => {
    // A seed the model never saw; features from the pipeline's own function.
    const { deliveries } = simulate({ seed: 4242, deliveries: 40, durationMs: 40 * 60_000 });
    const rows: number[][] = [];
    const labels: number[] = [];
    for (const d of deliveries) {
      for (let t = d.pickupMs + 120_000; t < d.deliveredMs; t += 120_000) {
        const f = computeFeatures(d.events, t);
        if (!f.ok) continue;
        rows.push(Array.from(featureVector(f.features)));
        labels.push(d.late ? 1 : 0);
      }
    }
    const a = auc(await risk(rows), labels);
    console.log(
      `delay-risk on seed 4242: ${deliveries.length} deliveries, ${rows.length} rows, AUC ${a.toFixed(4)}`,
    );
    expect(labels.filter((y) => y === 1).length).toBeGreaterThan(20);
    expect(a).toBeGreaterThanOrEqual(MIN_HELD_OUT_AUC);
  });
});

describe('auc', () => {
  it('is 1 for a perfect ranking, 0 for a reversed one, 0.5 for ties, and counts ties half', () => {
    expect(auc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1])).toBe(1);
    expect(auc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1])).toBe(0);
    expect(auc([0.5, 0.5, 0.5, 0.5], [0, 1, 0, 1])).toBe(0.5);
    // Pairs (pos, neg): (0.4 vs 0.1) win, (0.4 vs 0.4) tie, (0.3 vs 0.1) win, (0.3 vs 0.4) loss → 2.5 / 4.
    expect(auc([0.1, 0.4, 0.4, 0.3], [0, 0, 1, 1])).toBe(0.625);
    expect(auc([0.1, 0.2], [1, 1])).toBeNaN();
  });
});

describe('delay-risk build (child process: jest vm slows the trainer)', () => {
  it('rebuilds byte-identical files and reports the held-out AUC of the committed model', () => {
    const script = path.join(REPO_ROOT, 'dist', 'scripts', 'build-models.js');
    const r = spawnSync(process.execPath, [script, '--check', '--only', 'delay-risk'], {
      encoding: 'utf8',
      timeout: 110_000,
    });
    if (r.status !== 0)
      throw new Error(`build-models --check failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
    expect(r.stdout).toContain('all model files up to date');
    expect(r.stdout).toMatch(/delay-risk\/1\/model\.onnx\s+\d+ B\s+unchanged/);
    const m = /held-out AUC (\d\.\d+)/.exec(r.stdout);
    expect(Number(m?.[1])).toBeGreaterThanOrEqual(MIN_HELD_OUT_AUC);
    const readme = readFileSync(path.join(MODELS_DIR, 'delay-risk', 'README.md'), 'utf8');
    expect(readme).toContain(`| held-out | `);
    expect(readme).toContain(m![1]);
  }, 120_000);
});

describe('served by the server', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ models: ['delay-risk'], args: ['--workers', '1', '--model', 'delay-risk'] });
  }, 60_000);
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  it('answers over WebSocket and the Open Inference Protocol with the ONNX session’s risk', async () => {
    const row = [14, 3.2, 2, 1, 6];
    const [expected] = await risk([row]);
    const client = await WsClient.connect(server.wsUrl);
    const viaWs = await client.request({ id: 1, model: 'delay-risk', input: row });
    client.close();
    // A single-output model answers with the output itself.
    expect(viaWs).toMatchObject({ model: 'delay-risk', version: '1' });
    const wsRisk = viaWs.result as number[];
    expect(wsRisk).toHaveLength(1);
    expect(wsRisk[0]).toBeCloseTo(expected!, 6);
    const http = await postJson(`${server.url}/v2/models/delay-risk/infer`, {
      inputs: [{ name: 'features', shape: [1, N_FEATURES], datatype: 'FP32', data: row }],
    });
    expect(http.status).toBe(200);
    const outputs = http.body.outputs as Array<{ name: string; shape: number[]; data: number[] }>;
    expect(outputs[0]).toMatchObject({ name: 'risk', shape: [1, 1] });
    expect(outputs[0]!.data[0]).toBeCloseTo(expected!, 6);
  });
});
