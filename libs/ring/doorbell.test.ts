import { Doorbell } from './doorbell';

test('wait resolves on ring and times out otherwise', async () => {
  const bell = Doorbell.create();
  const seen = bell.sequence();
  expect(await bell.wait(seen, 10)).toBe('timed-out');
  const waiting = bell.wait(seen, 5000);
  bell.ring();
  expect(await waiting).toBe('ok');
  expect(await bell.wait(seen, 5000)).toBe('ok');
  expect(bell.sequence()).toBe(seen + 1);
});

test('from() shares the same bell and rejects garbage', () => {
  const bell = Doorbell.create();
  const other = Doorbell.from(bell.buffer);
  other.ring();
  expect(bell.sequence()).toBe(1);
  expect(() => Doorbell.from(new SharedArrayBuffer(2))).toThrow(/Doorbell/);
});
