import { createPlaced } from './placement';

const offline = Object.assign(new Error('no suitable peers for placement, peer offline'), { code: 10005 });
const tooSmall = Object.assign(new Error('insufficient resources'), { code: 10023 });

function clock() {
  let t = 0;
  return { now: () => t, sleep: async (ms: number) => void (t += ms) };
}

test('a placement refused for an offline peer is asked again until it is placed', async () => {
  let calls = 0;
  const result = await createPlaced(async () => {
    calls += 1;
    if (calls < 3) throw offline;
    return 'placed';
  }, clock());
  expect(result).toBe('placed');
  expect(calls).toBe(3);
});

test('an offline peer that stays offline: the refusal stands once the wait is spent', async () => {
  const c = clock();
  let calls = 0;
  await expect(
    createPlaced(
      async () => {
        calls += 1;
        throw offline;
      },
      { ...c, waitMs: 5000 },
    ),
  ).rejects.toBe(offline);
  expect(c.now()).toBeLessThanOrEqual(5000);
  expect(calls).toBeGreaterThan(2);
});

test('a cluster too small, or any other error, is refused at once', async () => {
  for (const err of [tooSmall, new Error('connection closed')]) {
    let calls = 0;
    await expect(
      createPlaced(async () => {
        calls += 1;
        throw err;
      }, clock()),
    ).rejects.toBe(err);
    expect(calls).toBe(1);
  }
});
