import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as lib from '../../libs/metrics';
import * as bench from '../../loadtest/harness/metrics';

// The parser and its helpers are tested beside the lib (libs/metrics/prom-text.test.ts); here: the bench
// reads them from the lib (one copy) and scrapes a real HTTP endpoint with them.
describe('loadtest/harness/metrics', () => {
  it('re-exports the lib parser and helpers instead of keeping its own', () => {
    expect(bench.parsePrometheusText).toBe(lib.parsePrometheusText);
    expect(bench.sumSamples).toBe(lib.sumSamples);
    expect(bench.histogramQuantile).toBe(lib.histogramQuantile);
    expect(bench.histogramMeanDelta).toBe(lib.histogramMeanDelta);
    expect(bench.sampleDeltas).toBe(lib.sampleDeltas);
  });

  describe('scrapeMetrics', () => {
    let server: http.Server;
    let base: string;
    beforeAll(async () => {
      server = http.createServer((req, res) => {
        if (req.url === '/metrics') {
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
          res.end('# TYPE a_total counter\na_total{m="x"} 3\na_total{m="y"} 4\n');
        } else if (req.url === '/broken') {
          res.writeHead(200);
          res.end('a_total{m="x" 3\n');
        } else {
          res.writeHead(503);
          res.end('down');
        }
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

    it('GETs and parses the text', async () => {
      const samples = await bench.scrapeMetrics(`${base}/metrics`);
      expect(bench.sumSamples(samples, 'a_total')).toBe(7);
    });

    it('rejects a non-200 answer and malformed text', async () => {
      await expect(bench.scrapeMetrics(`${base}/down`)).rejects.toThrow(/HTTP 503/);
      await expect(bench.scrapeMetrics(`${base}/broken`)).rejects.toBeInstanceOf(lib.PrometheusTextError);
    });
  });
});
