/** A malformed exposition line: its 1-based number and what was wrong with it. */
export class PrometheusTextError extends Error {
  readonly code = 'bad_metrics_text';
  constructor(
    readonly line: number,
    readonly problem: string,
    text: string,
  ) {
    super(`metrics line ${line}: ${problem}: ${text.slice(0, 200)}`);
    this.name = 'PrometheusTextError';
  }
}
