export {
  formatNotify,
  monotonicUsec,
  type NotifyAddress,
  NotifyError,
  type NotifyErrorCode,
  type NotifyFields,
  parseNotifySocket,
  parseWatchdog,
  type RequestCount,
  requestRate,
  type StatusFacts,
  statusLine,
  type WatchdogSettings,
} from './protocol';
export { type NotifyPhase, NotifySequence } from './sequence';
