// Figures derived from Pulsar TopicStats / PartitionedTopicStats JSON (GET .../stats, .../partitioned-stats).

/** {producers, subscriptions, consumers, backlog, unacked, msgInCounter, msgOutCounter, storageSize} of one
 *  TopicStats (a partitioned topic's aggregate has the same shape). backlog = sum of the subscriptions'
 *  msgBacklog (messages). */
export function summarize(stats) {
  const subscriptions = Object.values(stats.subscriptions || {});
  return {
    producers: (stats.publishers || []).length,
    subscriptions: subscriptions.length,
    consumers: subscriptions.reduce((n, s) => n + (s.consumers || []).length, 0),
    backlog: subscriptions.reduce((n, s) => n + (s.msgBacklog || 0), 0),
    unacked: subscriptions.reduce((n, s) => n + (s.unackedMessages || 0), 0),
    msgInCounter: stats.msgInCounter || 0,
    msgOutCounter: stats.msgOutCounter || 0,
    storageSize: stats.storageSize || 0,
    msgRateIn: typeof stats.msgRateIn === "number" ? stats.msgRateIn : null,
    msgRateOut: typeof stats.msgRateOut === "number" ? stats.msgRateOut : null,
  };
}

/** Publish / dispatch rates (msg/s) of named topics: the change of msgInCounter / msgOutCounter between two
 *  polls over the time between them (live, poll by poll); on the first poll, or after a counter went backwards
 *  (the topic was unloaded), the broker's msgRateIn / msgRateOut, which average over its stats period
 *  (stats_update_frequency_in_secs, 60 s by default, as Pulsar's), or null when it has none. */
export class RateTracker {
  constructor() {
    this.last = new Map();
  }

  update(name, summary, nowMs = performance.now()) {
    const previous = this.last.get(name);
    this.last.set(name, { t: nowMs, msgIn: summary.msgInCounter, msgOut: summary.msgOutCounter });
    let rateIn = summary.msgRateIn;
    let rateOut = summary.msgRateOut;
    if (previous && nowMs > previous.t) {
      const seconds = (nowMs - previous.t) / 1000;
      const dIn = summary.msgInCounter - previous.msgIn;
      const dOut = summary.msgOutCounter - previous.msgOut;
      if (dIn >= 0) rateIn = dIn / seconds;
      if (dOut >= 0) rateOut = dOut / seconds;
    }
    return { rateIn, rateOut };
  }
}
