/** The broker-free parts of the input stream's subjects: what it captures, what an existing one is. */
import {
  brokerPlacesEvents,
  checkInputStream,
  inputStreamSpec,
  partitionsOfSubjects,
  subjectsOverlap,
} from './input-stream';
import { streamLayout } from './layout';

const layout = streamLayout();
const P = 'delivery.events';

describe('input stream subjects', () => {
  test('2.10+ places events; 2.9 and unknown versions do not', () => {
    for (const v of ['2.10.0', '2.11.4', '2.15.2', 'v2.12.1', '3.0.0'])
      expect(brokerPlacesEvents(v)).toBe(true);
    for (const v of ['2.9.10', '2.2.0', '', undefined, 'nonsense']) expect(brokerPlacesEvents(v)).toBe(false);
  });

  test('the spec captures each partition and, where the broker places events, the delivery subject', () => {
    expect(inputStreamSpec(layout, 3, false)).toMatchObject({
      name: 'DELIVERY_EVENTS',
      subjects: [`${P}.0.*`, `${P}.1.*`, `${P}.2.*`],
      exclusive: { prefix: P, partitions: 3 },
    });
    expect(inputStreamSpec(layout, 3, false).subjectTransform).toBeUndefined();
    expect(inputStreamSpec(layout, 2, true)).toMatchObject({
      subjects: [`${P}.*`, `${P}.0.*`, `${P}.1.*`],
      subjectTransform: { src: `${P}.*`, dest: `${P}.{{partition(2,1)}}.{{wildcard(1)}}` },
    });
  });

  test('subject overlap follows NATS wildcards', () => {
    expect(subjectsOverlap(`${P}.>`, `${P}.9.x`)).toBe(true);
    expect(subjectsOverlap(`${P}.*`, `${P}.>`)).toBe(true);
    expect(subjectsOverlap('delivery.>', `${P}.>`)).toBe(true);
    expect(subjectsOverlap('>', `${P}.>`)).toBe(true);
    expect(subjectsOverlap(`${P}.*.*`, `${P}.1.*`)).toBe(true);
    expect(subjectsOverlap(`${P}.1.*`, `${P}.2.*`)).toBe(false);
    expect(subjectsOverlap(`${P}.*`, `${P}.1.*`)).toBe(false);
    expect(subjectsOverlap(P, `${P}.>`)).toBe(false);
    expect(subjectsOverlap('delivery.dlq', `${P}.>`)).toBe(false);
  });

  test('the partition count a stream was made for', () => {
    expect(partitionsOfSubjects([`${P}.*`, `${P}.0.*`, `${P}.1.*`], P)).toBe(2);
    expect(partitionsOfSubjects([`${P}.>`], P)).toBeNull();
    expect(partitionsOfSubjects([`${P}.0.*`, `${P}.2.*`], P)).toBeNull();
    expect(partitionsOfSubjects([`${P}.01.*`], P)).toBeNull();
  });

  test('an existing stream: in order, updatable, or refused with the reason', () => {
    const spec = inputStreamSpec(layout, 2, true);
    expect(
      checkInputStream(spec, { subjects: spec.subjects, subject_transform: spec.subjectTransform }),
    ).toEqual({
      missing: [],
      strays: [],
      transformDiffers: false,
      updatable: true,
    });
    expect(checkInputStream(spec, { subjects: [`${P}.>`] })).toMatchObject({
      missing: spec.subjects,
      strays: [`${P}.>`],
      transformDiffers: true,
      updatable: true,
    });
    expect(checkInputStream(spec, { subjects: [`${P}.0.*`, `${P}.1.*`] })).toMatchObject({
      missing: [`${P}.*`],
      transformDiffers: true,
      updatable: true,
    });
    expect(checkInputStream(inputStreamSpec(layout, 2, false), { subjects: spec.subjects })).toMatchObject({
      strays: [`${P}.*`],
      updatable: true,
    });
    expect(checkInputStream(spec, { subjects: [`${P}.0.*`, `${P}.1.*`, `${P}.2.*`] })).toMatchObject({
      updatable: false,
      refusal: expect.stringMatching(/made for 3 partitions and the pipeline has 2/),
    });
    expect(checkInputStream(spec, { subjects: ['delivery.>'] })).toMatchObject({
      strays: ['delivery.>'],
      updatable: false,
      refusal: 'it also captures delivery.>',
    });
  });
});
