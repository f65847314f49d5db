import { type FleetAnswer, renderFleet } from './fleet-view';
import { isControlCode, visible } from './status-frame';

const beat = (host: string, epoch: number, extra: Partial<FleetAnswer['hosts'][number]> = {}) => ({
  host,
  address: `http://10.0.0.${host.slice(-1)}:8000`,
  epoch,
  ready: true,
  fenced: false,
  defaultModel: 'digits',
  models: [{ name: 'digits', stable: '1', candidate: '2', canaryPercent: 10, shadow: false }],
  nodes: 2,
  startedAt: '2026-12-01T00:00:00.000Z',
  nodesReady: 2,
  requestsPerSecond: 120.5,
  beatAt: '2026-12-01T00:00:09.000Z',
  ...extra,
});

const answer: FleetAnswer = {
  fleet: 'prod',
  host: 'h1',
  epoch: 4,
  revision: 9,
  record: {
    format: 1,
    epoch: 4,
    reloadId: 'r0',
    strategy: 'atomic',
    reason: 'canary digits',
    committedBy: 'h2',
    committedAt: '2026-12-01T00:00:00.000Z',
    table: { defaultModel: 'digits', models: [] },
  },
  members: [
    { host: 'h1', live: true },
    { host: 'h2', live: true },
    { host: 'h3', live: true },
  ],
  strangers: [],
  hosts: [
    beat('h1', 4),
    beat('h2', 3),
    beat('h3', 3, { fenced: true, fenceReason: 'in doubt about fleet reload r1', ready: false }),
  ],
  coordinator: null,
};

describe('renderFleet', () => {
  const text = renderFleet(answer, Date.parse('2026-12-01T00:00:10.000Z'));
  const lines = text.split('\n');

  it('heads with the fleet epoch, revision, host count and the last change', () => {
    expect(lines[0]).toBe(
      'fleet prod: epoch 4 (revision 9), 3 hosts; last change "canary digits" by h2 at 2026-12-01T00:00:00.000Z',
    );
    expect(lines[1]).toBe('  no change in progress');
  });

  it('one line per host: ready, behind the fleet epoch, or fenced with why', () => {
    expect(lines).toHaveLength(5);
    expect(lines[2]).toMatch(/^ {2}h1 +http:\/\/10\.0\.0\.1:8000 +epoch 4 +ready +nodes 2\/2 +120\.5 req\/s/);
    expect(lines[3]).toContain('BEHIND');
    expect(lines[4]).toContain('FENCED (in doubt about fleet reload r1)');
    expect(lines[2]).toContain('digits@1 (cand 2, 10%)');
    expect(lines[2]).toContain('seen 1s ago');
  });

  it('lists members without a heartbeat as DOWN, and the ignored heartbeats of non-members', () => {
    const text = renderFleet({
      ...answer,
      members: [...answer.members, { host: 'h4', live: false }],
      strangers: ['ghost'],
    });
    expect(text).toContain('  h4  DOWN (a member with no heartbeat)');
    expect(text).toContain('  ignored heartbeats, not members: ghost');
  });

  it('says when a change is in progress and when no host heartbeats', () => {
    const busy = renderFleet({ ...answer, hosts: [], coordinator: { host: 'h2', reloadId: 'r9' } });
    expect(busy).toContain('change in progress: r9 coordinated by h2');
    expect(busy).toContain('no host is heartbeating');
  });
});

describe('renderFleet: heartbeat fields are printed with control characters visible', () => {
  const ESC = '\x1b';
  const hostile: FleetAnswer = {
    ...answer,
    fleet: `prod${ESC}]0;owned\x07`,
    record: { ...answer.record, reason: `ok${ESC}[2J${ESC}[31mred`, committedBy: `h2\r\nfake line` },
    hosts: [
      beat('h1', 4, {
        host: `h1${ESC}[1A${ESC}[2K`,
        address: `http://10.0.0.1:8000\x9b31m`,
        fenced: true,
        fenceReason: `doubt\x7f\x00`,
        models: [
          {
            name: `digits${ESC}[5m`,
            stable: `1\x1b`,
            candidate: '2\u0085',
            canaryPercent: 10,
            shadow: false,
          },
        ],
      }),
    ],
    coordinator: { host: `h9${ESC}c`, reloadId: `r1\x08\x08` },
  };
  const text = renderFleet(hostile, Date.parse('2026-12-01T00:00:10.000Z'));

  it('no C0 (but the line breaks it writes), C1, ESC or DEL character reaches the terminal', () => {
    for (const line of text.split('\n'))
      expect([...line].filter((c) => isControlCode(c.charCodeAt(0)))).toEqual([]);
    expect(text.split('\n')).toHaveLength(3);
  });

  it('each is shown as an escape a reader can see', () => {
    expect(text).toContain('prod\\x1b]0;owned\\x07');
    expect(text).toContain('"ok\\x1b[2J\\x1b[31mred" by h2\\r\\nfake line');
    expect(text).toContain('h1\\x1b[1A\\x1b[2K');
    expect(text).toContain('http://10.0.0.1:8000\\x9b31m');
    expect(text).toContain('FENCED (doubt\\x7f\\x00)');
    expect(text).toContain('digits\\x1b[5m@1\\x1b (cand 2\\x85, 10%)');
    expect(text).toContain('r1\\x08\\x08 coordinated by h9\\x1bc');
  });
});

describe('visible', () => {
  it('leaves printable text as it is and escapes C0, DEL and C1', () => {
    expect(visible('digits v2 — ok ✓')).toBe('digits v2 — ok ✓');
    expect(visible('\x00\x1f\x7f\x80\x9f\\')).toBe('\\x00\\x1f\\x7f\\x80\\x9f\\');
    expect(visible('a\tb\nc')).toBe('a\\tb\\nc');
  });
});
