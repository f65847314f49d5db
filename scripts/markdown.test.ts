import { markdownTable } from './markdown';

describe('markdownTable', () => {
  it('pads every column to its width (at least 3, counted in code points) for the generated READMEs', () => {
    // what scripts/models/digits.ts's own padded table gave (models/digits and delay-risk READMEs)
    expect(
      markdownTable(
        ['#', 'feature', 'x'],
        [
          ['0', '`speed_5m_kmh`', '(t − 5 min, t]'],
          ['10', 'é', ''],
        ],
        { pad: true },
      ),
    ).toBe(
      [
        '| #   | feature        | x              |',
        '| --- | -------------- | -------------- |',
        '| 0   | `speed_5m_kmh` | (t − 5 min, t] |',
        '| 10  | é              |                |',
      ].join('\n'),
    );
  });

  it('leaves cells unpadded for the bench reports, numbers right-aligned', () => {
    expect(markdownTable(['a', 'n'], [['x', 1234]])).toBe('| a | n |\n| --- | ---: |\n| x | 1,234 |');
    expect(markdownTable(['a'], [['x']], { align: ['center'], pad: true })).toBe('| a   |\n| :-: |\n| x   |');
  });
});
