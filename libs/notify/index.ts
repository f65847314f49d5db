export { NotifyError, type NotifyErrorCode } from './errors';
export {
  formatNotify,
  monotonicUsec,
  type NotifyAddress,
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
