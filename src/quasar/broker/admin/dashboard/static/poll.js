// Owned polling loops: each page's loops belong to its PageContext, which the router disposes of when the
// page is left (every timer stopped, every request in flight aborted). A loop never overlaps itself: the next
// round is scheduled after the previous one finished.

export class Poller {
  /** fn(signal) -> optional next interval in ms; onError(error) for a failed round (AbortError ignored). */
  constructor(fn, intervalMs, onError) {
    this.fn = fn;
    this.intervalMs = intervalMs;
    this.onError = onError;
    this.controller = new AbortController();
    this.timer = null;
    this.stopped = false;
  }

  start() {
    this.round();
    return this;
  }

  async round() {
    if (this.stopped) return;
    let next = this.intervalMs;
    try {
      const asked = await this.fn(this.controller.signal);
      if (typeof asked === "number") next = asked;
    } catch (error) {
      if (this.stopped || (error && error.name === "AbortError")) return;
      this.onError(error);
    }
    if (!this.stopped) this.timer = setTimeout(() => this.round(), next);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.controller.abort();
  }
}

/** What a page is given: poll(fn, ms) starts an owned loop; ok()/error(e) report on the status line;
 *  signal aborts one-off requests when the page is left. */
export class PageContext {
  constructor(report) {
    this.report = report;
    this.pollers = [];
    this.controller = new AbortController();
    this.signal = this.controller.signal;
  }

  poll(fn, intervalMs) {
    const poller = new Poller(fn, intervalMs, (error) => this.error(error));
    this.pollers.push(poller);
    return poller.start();
  }

  ok() {
    if (!this.signal.aborted) this.report(null);
  }

  error(error) {
    if (!this.signal.aborted) this.report(error);
  }

  dispose() {
    this.controller.abort();
    for (const poller of this.pollers) poller.stop();
    this.pollers = [];
  }
}
