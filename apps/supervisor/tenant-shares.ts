/**
 * Tenants on the supervisor's side: the API keys file read and validated (the I/O around libs/tenants), and
 * the share split of each tenant's limits between the node processes, sent every SHARE_PERIOD_MS over the
 * supervisor↔node IPC channel (one message each way per node and period; nothing per request).
 */
import { readFileSync } from 'node:fs';
import {
  parseTenantFile,
  ShareSplitter,
  type TenantDemand,
  TenantFileError,
  type TenantSpec,
} from '../../libs/tenants';
import type { SupervisorMessage } from '../node/ipc';

/** How often the shares move (ms): a busy node gets an idle one's share about two periods later. */
export const SHARE_PERIOD_MS = 50;

/** Reads and validates the API keys file; TenantFileError names the file and the bad entry. */
export function readTenantFile(file: string): TenantSpec[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new TenantFileError(`cannot read the API keys file ${file}: ${(error as Error).message}`);
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new TenantFileError(`API keys file ${file}: not valid JSON: ${(error as Error).message}`);
  }
  return parseTenantFile(document, `API keys file ${file}`);
}

export class TenantShares {
  private readonly splitter = new ShareSplitter();
  private timer: NodeJS.Timeout | undefined;
  private active = false;

  /** `send`: to one node, false when it cannot be reached (exited, or not connected yet). */
  constructor(
    private readonly send: (node: number, message: SupervisorMessage) => boolean,
    private readonly now: () => number = Date.now,
  ) {}

  /** The tenants now (a committed reload changes them); undefined: none, and nothing is sent. */
  setTenants(tenants: readonly TenantSpec[] | undefined): void {
    this.splitter.setLimits(tenants ?? []);
    this.active = tenants !== undefined;
    if (this.active && !this.timer) {
      this.timer = setInterval(() => this.tick(), SHARE_PERIOD_MS);
      this.timer.unref();
    } else if (!this.active && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
    if (this.active) this.tick();
  }

  /** A node process was forked: it holds no share until it is sent one. */
  nodeStarted(node: number): void {
    this.splitter.addNode(node);
  }

  /** A node process exited: what it held is free for the others. */
  nodeGone(node: number): void {
    this.splitter.removeNode(node);
  }

  /** A node is about to be told to listen: it gets its shares first (the same channel keeps the order). */
  beforeListen(): void {
    if (this.active) this.tick();
  }

  report(node: number, seq: number, tenants: Record<string, TenantDemand>): void {
    this.splitter.report(node, seq, tenants, this.now());
  }

  private tick(): void {
    for (const [node, message] of this.splitter.plan())
      this.send(node, { type: 'tenant-shares', seq: message.seq, shares: message.shares });
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.active = false;
  }
}
