import { EpochOrder } from './epoch-order';

const limits = { maxHoldMs: 1000, maxHoldBytes: 100 };

test('no reload: every answer goes at once, nothing is held', () => {
  const order = new EpochOrder<string>(limits);
  for (let i = 0; i < 5; i++) order.admitted(3);
  for (let i = 0; i < 5; i++) expect(order.answered(3)).toBe(true);
  expect(order.heldCount).toBe(0);
  expect(order.releaseAt).toBeUndefined();
});

test('a new-epoch answer waits for the older ones of its connection, then goes after them', () => {
  const order = new EpochOrder<string>(limits);
  order.admitted(1);
  order.admitted(1);
  order.admitted(2);
  order.admitted(2);
  expect(order.answered(2)).toBe(false);
  expect(order.hold(2, 'new-a', 10, 0)).toBeUndefined();
  expect(order.heldBytes).toBe(10);
  // An older answer goes at once (it is still in order); its sibling is still computing.
  expect(order.answered(1)).toBe(true);
  expect(order.takeReady()).toBeUndefined();
  expect(order.answered(1)).toBe(true);
  expect(order.takeReady()).toEqual(['new-a']);
  expect(order.heldBytes).toBe(0);
  // Nothing older is left: the last new answer goes at once.
  expect(order.answered(2)).toBe(true);
});

test('held answers of several epochs go oldest first, each once nothing older is awaited', () => {
  const order = new EpochOrder<string>(limits);
  order.admitted(1);
  order.admitted(2);
  order.admitted(3);
  expect(order.answered(3)).toBe(false);
  order.hold(3, 'three', 1, 0);
  expect(order.answered(2)).toBe(false);
  order.hold(2, 'two', 1, 0);
  expect(order.answered(1)).toBe(true);
  expect(order.takeReady()).toEqual(['two', 'three']);
});

test('the time bound: at maxHoldMs after the first held answer everything goes, and the starved epoch is no longer awaited', () => {
  const order = new EpochOrder<string>(limits);
  order.admitted(1); // starved: never answered in this test
  order.admitted(2);
  order.admitted(2);
  order.admitted(2);
  expect(order.answered(2)).toBe(false);
  order.hold(2, 'a', 10, 5000);
  expect(order.releaseAt).toBe(6000);
  expect(order.answered(2)).toBe(false);
  order.hold(2, 'b', 10, 5900);
  expect(order.expired(5999)).toBe(false);
  expect(order.expired(6000)).toBe(true);
  expect(order.releaseAll()).toEqual(['a', 'b']);
  expect(order.heldBytes).toBe(0);
  // Later answers of the same epoch are not held again behind the starved one.
  expect(order.answered(2)).toBe(true);
  // ...but a newer epoch still waits for epoch 2 requests it follows.
  order.admitted(2);
  order.admitted(3);
  expect(order.answered(3)).toBe(false);
});

test('the byte bound: a hold that passes maxHoldBytes asks for release at once', () => {
  const order = new EpochOrder<string>(limits);
  order.admitted(1);
  order.admitted(2);
  order.admitted(2);
  expect(order.answered(2)).toBe(false);
  expect(order.hold(2, 'a', 60, 0)).toBeUndefined();
  expect(order.answered(2)).toBe(false);
  expect(order.hold(2, 'b', 60, 1)).toBe('bytes');
  expect(order.heldBytes).toBe(120);
  expect(order.releaseAll()).toEqual(['a', 'b']);
  expect(order.heldBytes).toBe(0);
});

test('entries with nothing unanswered stay put until the epoch changes, then are dropped', () => {
  const order = new EpochOrder<string>(limits);
  order.admitted(7);
  expect(order.answered(7)).toBe(true);
  order.admitted(7);
  expect(order.answered(7)).toBe(true);
  order.admitted(8);
  // Epoch 7 has nothing unanswered: an epoch-8 answer does not wait for it.
  expect(order.answered(8)).toBe(true);
});

test('a closed connection drops what it held', () => {
  const order = new EpochOrder<string>(limits);
  order.admitted(1);
  order.admitted(2);
  expect(order.answered(2)).toBe(false);
  order.hold(2, 'x', 5, 0);
  order.clear();
  expect(order.heldCount).toBe(0);
  expect(order.heldBytes).toBe(0);
  expect(order.releaseAt).toBeUndefined();
});
