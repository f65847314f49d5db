/**
 * The effects of one message's decisions: a prediction per decision on `<root>.delivery.predictions.<id>`
 * (Msg-Id = its decision id) and, when the delivery starts alerting, an alert on `<root>.delivery.alerts.<id>`
 * (Msg-Id = `alert:<decision id>`). Built in arrival order per delivery: the alert state is the decider's.
 */
import { type Decision, type DeliveryDecider, decisionId, type Prediction } from '../../libs/delivery';
import type { ModelPin } from './inference/inference';
import { keySubject, type SubjectLayout } from './io/layout';
import type { Effect } from './io/sink';

export function decisionEffects(
  decisions: readonly Decision[],
  risks: readonly number[],
  pin: ModelPin,
  epoch: number,
  decider: DeliveryDecider,
  subjects: SubjectLayout,
  publishedAt: string,
): Effect[] {
  const effects: Effect[] = [];
  decisions.forEach((d, i) => {
    const risk = risks[i]!;
    const id = decisionId({
      delivery_id: d.delivery_id,
      event_id: d.event_id,
      model: pin.model,
      version: pin.version,
      revision: d.revision,
    });
    const prediction: Prediction = {
      event_id: d.event_id,
      delivery_id: d.delivery_id,
      event_time: d.event_time,
      model: pin.model,
      version: pin.version,
      epoch,
      risk,
      revision: d.revision,
      decision_id: id,
      published_at: publishedAt,
    };
    effects.push({
      subject: keySubject(subjects.predictionsPrefix, d.delivery_id),
      data: JSON.stringify(prediction),
      msgId: id,
    });
    if (decider.alertFor(d.delivery_id, risk)) {
      effects.push({
        subject: keySubject(subjects.alertsPrefix, d.delivery_id),
        data: JSON.stringify({ ...prediction, threshold: decider.alertThreshold }),
        msgId: `alert:${id}`,
      });
    }
  });
  return effects;
}
