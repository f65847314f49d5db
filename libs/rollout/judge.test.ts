import { ERROR_CODES } from '../protocol';
import { JUDGED, judgeAnswer, judgedByCode, ServiceTimes, VERSION_FAULT_CODES } from './index';

describe('judgeAnswer: what a rollout check may count', () => {
  test('a pinned request never counts, whatever its answer', () => {
    for (const code of ['ok', ...ERROR_CODES] as const)
      expect(judgeAnswer('pinned', code, 1000, 1)).toBe(JUDGED.excluded);
  });

  test('routed answers: ok counts, model_error and internal are the version’s errors', () => {
    for (const route of ['stable', 'canary'] as const) {
      expect(judgeAnswer(route, 'ok', 1000, 1)).toBe(JUDGED.ok);
      expect(judgeAnswer(route, 'model_error', 1000, 1)).toBe(JUDGED.error);
      expect(judgeAnswer(route, 'internal', 1000, 1)).toBe(JUDGED.error);
    }
  });

  test('client and load faults are left out (rate_limited, overloaded, shed, bad requests, shutdown)', () => {
    for (const code of [
      'bad_request',
      'unknown_model',
      'unknown_version',
      'shape_mismatch',
      'type_mismatch',
      'payload_too_large',
      'rate_limited',
      'client_queue_full',
      'overloaded',
      'unavailable',
      'fenced',
      'unauthorized',
    ] as const)
      expect([code, judgeAnswer('canary', code, 1000, 1)]).toEqual([code, JUDGED.excluded]);
  });

  test('every code but ok, model_error, internal and deadline_exceeded is excluded (new codes too)', () => {
    for (const code of ERROR_CODES) {
      const verdict = judgeAnswer('stable', code, 1000, 1);
      if (VERSION_FAULT_CODES.has(code) || code === 'deadline_exceeded')
        expect([code, verdict]).toEqual([code, JUDGED.error]);
      else expect([code, verdict]).toEqual([code, JUDGED.excluded]);
    }
  });

  test('deadline_exceeded counts only when the deadline was at least the measured service time', () => {
    expect(judgeAnswer('canary', 'deadline_exceeded', 0.001, 0.4)).toBe(JUDGED.excluded);
    expect(judgeAnswer('canary', 'deadline_exceeded', 0.399, 0.4)).toBe(JUDGED.excluded);
    expect(judgeAnswer('canary', 'deadline_exceeded', 0.4, 0.4)).toBe(JUDGED.error);
    expect(judgeAnswer('stable', 'deadline_exceeded', 30000, 0.4)).toBe(JUDGED.error);
    // nothing measured yet: the floor is 0, every routed timeout counts
    expect(judgeAnswer('stable', 'deadline_exceeded', 0.001, 0)).toBe(JUDGED.error);
    expect(judgeAnswer('pinned', 'deadline_exceeded', 30000, 0)).toBe(JUDGED.excluded);
  });

  test('judgedByCode is judgeAnswer for routed answers, indexed by wire code (0 = ok)', () => {
    expect(judgedByCode.length).toBe(ERROR_CODES.length + 1);
    expect(judgedByCode[0]).toBe(JUDGED.ok);
    ERROR_CODES.forEach((code, index) => {
      const expected = code === 'deadline_exceeded' ? JUDGED.deadline : judgeAnswer('canary', code, 1, 0);
      expect([code, judgedByCode[index + 1]]).toEqual([code, expected]);
    });
  });
});

describe('ServiceTimes: the service floor of a model', () => {
  test('nothing measured: floor 0', () => {
    const times = new ServiceTimes(8);
    expect(times.floorMs('digits')).toBe(0);
  });

  test('a version’s floor is its running mean of queue + compute', () => {
    const times = new ServiceTimes(8);
    for (let i = 0; i < 200; i++) times.observe(1, 'digits', '2', 2);
    expect(times.floorMs('digits')).toBeCloseTo(2, 5);
    times.observe(1, 'digits', '2', 10);
    // one slow answer moves the mean by 1/32 of the difference
    expect(times.floorMs('digits')).toBeCloseTo(2 + 8 / 32, 5);
  });

  test('the floor is the fastest version of the model: a slow version cannot excuse its own timeouts', () => {
    const times = new ServiceTimes(8);
    for (let i = 0; i < 100; i++) {
      times.observe(1, 'digits', '2', 1);
      times.observe(2, 'digits', '1', 500);
      times.observe(3, 'echo', '1', 0.1);
    }
    expect(times.floorMs('digits')).toBeCloseTo(1, 5);
    expect(times.floorMs('echo')).toBeCloseTo(0.1, 5);
    expect(times.floorMs('upper')).toBe(0);
  });

  test('a slot reused for another version starts again', () => {
    const times = new ServiceTimes(8);
    for (let i = 0; i < 100; i++) times.observe(1, 'digits', '2', 5);
    times.observe(1, 'digits', '3', 1);
    expect(times.floorMs('digits')).toBe(1);
    times.observe(1, 'echo', '1', 7);
    expect(times.floorMs('digits')).toBe(0);
    expect(times.floorMs('echo')).toBe(7);
  });

  test('non-finite or negative measurements are ignored; slots outside the table are ignored', () => {
    const times = new ServiceTimes(4);
    times.observe(1, 'digits', '2', Number.NaN);
    times.observe(1, 'digits', '2', -1);
    times.observe(9, 'digits', '2', 3);
    expect(times.floorMs('digits')).toBe(0);
  });
});
