/** Messages between the supervisor and its node processes (Node IPC channel, control only — never request bytes). */
import type { DeviceTarget } from '../../libs/config';
import type { MetricJson } from '../../libs/metrics';
import type { NodeSettings, TablePlan, UnavailableModel } from '../../libs/registry';
import type { Share, TenantDemand } from '../../libs/tenants';

/** How a node process starts: its own place in the host, then the live settings (see NodeSettings). */
export interface NodeStartOptions extends NodeSettings {
  nodeIndex: number;
  port: number;
  host: string;
  /** This node's own device: the supervisor picks it from the validated `device` setting. */
  device: DeviceTarget;
  workers: number;
  intraOpThreads: number;
  modelsDir: string;
  /** Versions pulled from the fleet (`<stateDir>/models`), read with modelsDir as one repository. */
  modelCacheDir?: string;
  defaultModel: string;
  ringBytes: number;
  testHooks: boolean;
  /** The host's current model table and epoch: a node (re)starts exactly on it. */
  plan: TablePlan;
  epoch: number;
  /** How many times this node index was restarted before (absent or 0: first start). */
  restarts?: number;
  /** The host is fenced from its fleet (why): the node refuses requests `fenced` until told otherwise. */
  fence?: string;
  /** Also route /metrics on the data port (to the supervisor), for scrapers of the old address. */
  metricsOnDataPort: boolean;
}

export interface ModelVersionStatus {
  version: string;
  slot: number;
  executionProvider: string;
  loadedWorkers: number;
  fallbackReason?: string;
}

export interface ModelStatus {
  name: string;
  description: string;
  defaultVersion: string;
  aliases: Record<string, string>;
  canaryPercent: number;
  shadow: boolean;
  versions: ModelVersionStatus[];
  inputs: unknown[];
  outputs: unknown[];
  labels?: string[];
}

export interface NodeHealth {
  nodeIndex: number;
  pid: number;
  state: 'starting' | 'ready' | 'draining';
  workers: number;
  workersReady: number;
  defaultModel: string;
  models: ModelStatus[];
  inflight: number;
  wsConnections: number;
  epoch: number;
}

export interface ControlRequest {
  method: string;
  path: string;
  query: string;
  body: string;
}

export interface ControlResponse {
  status: number;
  contentType: string;
  body: string;
  headers?: Record<string, string>;
}

/** supervisor → node */
export type SupervisorMessage =
  | { type: 'start'; options: NodeStartOptions }
  | { type: 'control-response'; requestId: number; response: ControlResponse }
  | { type: 'collect'; requestId: number; what: 'metrics' | 'health' }
  | { type: 'crash-worker'; requestId: number; workerIndex: number }
  | { type: 'prepare'; requestId: number; plan: TablePlan }
  | { type: 'commit'; requestId: number; plan: TablePlan; epoch: number }
  | { type: 'abort'; requestId: number }
  | { type: 'release'; requestId: number; plan: TablePlan }
  | { type: 'roll'; requestId: number; plan: TablePlan; epoch: number }
  /** To a loaded node that does not listen yet: a reload committed while it loaded; move to this table. */
  | { type: 'sync'; requestId: number; plan: TablePlan; epoch: number }
  /** The node is at the host's table and epoch, and in every reload from now on: take traffic. */
  | { type: 'listen'; port: number }
  /** Mutual TLS: the host's listening socket, sent as the message's handle (the answer to want-listen-handle). */
  | { type: 'listen-handle' }
  /** Liveness: answered from the node's main event loop, so a blocked loop stops the watchdog (see notify.ts). */
  | { type: 'ping'; seq: number }
  /** Test hook: block the main event loop this long (a wedged node). */
  | { type: 'block'; ms: number }
  /** The host was fenced from its fleet (reason) or rejoined it (null). */
  | { type: 'fence'; reason: string | null }
  /** Tenants (--api-keys): this node's share of each tenant's limits from now on; answered by `tenant-report`. */
  | { type: 'tenant-shares'; seq: number; shares: Record<string, Share> }
  | { type: 'shutdown' };

/** node → supervisor */
export type NodeMessage =
  /**
   * The start table is loaded (at `epoch`) but for `failures` (versions or models that did not load: the
   * supervisor syncs the node to a table without them, or restarts it); the node does not listen until told to.
   */
  | { type: 'loaded'; nodeIndex: number; epoch: number; failures?: UnavailableModel[] }
  | { type: 'listening'; nodeIndex: number; port: number }
  /** Mutual TLS: this node is about to accept on the host's port and needs its listening socket. */
  | { type: 'want-listen-handle'; nodeIndex: number }
  | { type: 'ready'; nodeIndex: number; health: NodeHealth }
  | { type: 'start-failed'; nodeIndex: number; error: string }
  | { type: 'control-request'; requestId: number; request: ControlRequest }
  | { type: 'collected'; requestId: number; metrics?: MetricJson[]; health?: NodeHealth }
  | { type: 'command-result'; requestId: number; ok: boolean; error?: string; data?: unknown }
  | { type: 'drained'; nodeIndex: number; answered: number; abandoned: number }
  /** The answer to `ping`, with the requests this node has answered so far (for STATUS= requests/s). */
  | { type: 'pong'; seq: number; answered: number }
  /** The answer to `tenant-shares` (applied): each known tenant's demand since the last report, open connections. */
  | { type: 'tenant-report'; seq: number; tenants: Record<string, TenantDemand> };
