// The WebSocket connection to /v1/ws (subprotocol ensemble.v1): hello/ready
// handshake, request/response by client-chosen id, server pings, managed
// subscriptions with (epoch, seq) resume on the same replica and durable
// {epoch, version} positions on any replica (position.js), and reconnect with full-jitter
// exponential backoff. No DOM access here beyond `navigator`/`window`
// events, so the pure parts are testable under node.

import { positionAfterEvent, positionAfterResult, withPosition } from './position.js';

export const PROTOCOL = 'ensemble.v1';
// PROTOCOLS offers version 2 first: several events may arrive in one frame
// (a JSON array of frames, in order).
export const PROTOCOLS = ['ensemble.v2', PROTOCOL];

// backoffDelay is "full jitter": a uniform delay in [0, min(cap, base·2^n)),
// never below a small floor so a flapping server is not hammered.
export function backoffDelay(attempt, { base = 500, cap = 10000, floor = 100, random = Math.random } = {}) {
  const ceiling = Math.min(cap, base * 2 ** Math.max(0, attempt));
  return Math.max(floor, Math.floor(random() * ceiling));
}

// shouldReconnect: 4000–4499 reconnect, 4500–4999 do not; anything else
// (network drop 1006, server restart 1001/1012, …) reconnects.
export function shouldReconnect(code) {
  return !(code >= 4500 && code <= 4999);
}

// classifyEvent decides what a subscription does with an event:
// 'apply' (next in sequence), 'duplicate' (already seen), 'resync' (gap or
// new epoch: ask the server again with resume).
export function classifyEvent(sub, ev) {
  if (sub.epoch != null && ev.epoch != null && ev.epoch !== sub.epoch) return 'resync';
  if (sub.seq == null) return 'apply';
  if (ev.seq <= sub.seq) return 'duplicate';
  if (ev.seq === sub.seq + 1) return 'apply';
  return 'resync';
}

export class RequestError extends Error {
  constructor({ code = 'internal', message = 'request failed', retryable = false, reason = '', retryAfterMs = 0 } = {}) {
    super(message);
    this.name = 'RequestError';
    this.code = code;
    this.retryable = !!retryable;
    this.reason = reason;
    this.retryAfterMs = retryAfterMs; // the server's back-off hint, obeyed on retry
  }
}

let nextId = 0;
function newRequestId() {
  nextId += 1;
  return `c${Date.now().toString(36)}-${nextId}`;
}

const READY_TIMEOUT_MS = 15000;
const IDLE_TIMEOUT_MS = 65000; // server pings about every 25 s

export class Connection extends EventTarget {
  constructor({ url, token, timeoutMs = 20000, WebSocketImpl = globalThis.WebSocket } = {}) {
    super();
    this.url = url;
    this.token = token;
    this.timeoutMs = timeoutMs;
    this.WebSocketImpl = WebSocketImpl;
    this.state = 'reconnecting'; // connected | reconnecting | offline
    this.info = { epoch: '', connectionId: '', principal: null, retryAt: 0, reason: '', attempt: 0, connectedOnce: false };
    this.ws = null;
    this.ready = false;
    this.stopped = true;
    this.attempt = 0;
    this.pending = new Map(); // id -> {resolve, reject, timer, frame, sent}
    this.subs = new Set();
    this.subsByName = new Map();
    this.orphans = []; // events for a topic name not yet known
    this.unsubscribing = new Set(); // in-flight unsubscribe requests
    this.timers = { retry: 0, ready: 0, idle: 0 };
    this.lastFrameAt = 0;
    this._onOnline = () => this.reconnectNow();
    this._onOffline = () => {
      if (this.ws) this.ws.close(4000, 'browser offline');
      this._setState('offline', { reason: 'Your browser is offline.' });
    };
  }

  start() {
    if (!this.stopped) return;
    this.stopped = false;
    if (typeof window !== 'undefined') {
      window.addEventListener('online', this._onOnline);
      window.addEventListener('offline', this._onOffline);
    }
    this.timers.idle = setInterval(() => this._checkIdle(), 5000);
    this._connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timers.retry);
    clearTimeout(this.timers.ready);
    clearInterval(this.timers.idle);
    if (typeof window !== 'undefined') {
      window.removeEventListener('online', this._onOnline);
      window.removeEventListener('offline', this._onOffline);
    }
    if (this.ws) this.ws.close(1000, 'bye');
    this.ws = null;
    this._failPending(new RequestError({ code: 'unavailable', message: 'connection closed', retryable: true, reason: 'connection_closed' }), true);
  }

  // reconnectNow skips the remaining backoff delay.
  reconnectNow() {
    if (this.stopped || this.ready) return;
    clearTimeout(this.timers.retry);
    this.attempt = 0;
    if (this.ws) return;
    this._connect();
  }

  // setToken swaps the token; on an open connection it is sent at once as a
  // refresh (the server answers with a fresh ready on the same connection).
  setToken(token) {
    if (!token || token === this.token) return;
    this.token = token;
    if (this.ready) this._send({ type: 'hello', token });
  }

  // request sends one operation and resolves with its result or rejects with
  // a RequestError. Requests made while disconnected wait for the connection
  // (within the timeout). A request whose connection drops after it was sent
  // rejects with code "unavailable", reason "connection_lost": its outcome is
  // unknown, so only idempotent requests (clientSubmitId) may be retried.
  request(op, input = {}, { timeoutMs = this.timeoutMs } = {}) {
    const id = newRequestId();
    const frame = JSON.stringify({ type: 'request', id, op, input });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new RequestError({ code: 'unavailable', message: `no answer to ${op} within ${Math.round(timeoutMs / 1000)} s`, retryable: true, reason: 'timeout' }));
      }, timeoutMs);
      const p = { resolve, reject, timer, frame, sent: false, op };
      this.pending.set(id, p);
      if (this.ready) this._sendPending(p);
    });
  }

  // subscribe keeps a subscription alive across reconnects. handlers:
  // onSnapshot(snapshot, result) when the server sends a complete state,
  // onEvent(kind, payload, event) for each in-order event,
  // onChanges(changes, result) when a recovery brings changed state,
  // onError(err) when subscribing fails.
  subscribe(input, handlers) {
    const sub = { input, handlers, name: null, epoch: null, seq: null, position: null, syncing: false, buffer: [], closed: false, retryTimer: 0 };
    this.subs.add(sub);
    if (this.ready) this._subscribeOne(sub);
    return {
      close: () => {
        sub.closed = true;
        clearTimeout(sub.retryTimer);
        this.subs.delete(sub);
        if (sub.name && this.subsByName.get(sub.name) === sub) {
          this.subsByName.delete(sub.name);
          if (this.ready) {
            const p = this.request('unsubscribe', { ...pick(input, 'workspace'), sub: sub.name }, { timeoutMs: 5000 }).catch(() => {});
            this.unsubscribing.add(p);
            p.finally(() => this.unsubscribing.delete(p));
          }
        }
      },
      resync: () => this._subscribeOne(sub),
    };
  }

  // ---- internals ----

  _setState(state, extra = {}) {
    this.state = state;
    Object.assign(this.info, extra);
    this.dispatchEvent(new CustomEvent('state', { detail: { state, ...this.info } }));
  }

  _connect() {
    if (this.stopped) return;
    if (typeof navigator !== 'undefined' && navigator.onLine === false) {
      this._setState('offline', { reason: 'Your browser is offline.' });
      return;
    }
    this._setState('reconnecting', { retryAt: 0, attempt: this.attempt });
    let ws;
    try {
      ws = new this.WebSocketImpl(this.url, PROTOCOLS);
    } catch (err) {
      this._scheduleReconnect(`cannot open WebSocket: ${err.message}`);
      return;
    }
    this.ws = ws;
    this.ready = false;
    this.lastError = null;
    ws.onopen = () => {
      this.lastFrameAt = Date.now();
      ws.send(JSON.stringify({ type: 'hello', token: this.token }));
      this.timers.ready = setTimeout(() => ws.close(4000, 'no ready'), READY_TIMEOUT_MS);
    };
    ws.onmessage = (e) => {
      if (this.ws !== ws) return;
      this.lastFrameAt = Date.now();
      let msg;
      try { msg = JSON.parse(e.data); } catch { return; }
      if (Array.isArray(msg)) { for (const m of msg) if (this.ws === ws) this._onFrame(m); return; }
      this._onFrame(msg);
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this._onClose(e.code, e.reason);
    };
    ws.onerror = () => { /* onclose follows */ };
  }

  _onFrame(msg) {
    switch (msg.type) {
      case 'ready': {
        clearTimeout(this.timers.ready);
        const refreshed = this.ready; // a second ready answers a token refresh
        this.ready = true;
        this.attempt = 0;
        this._setState('connected', {
          epoch: msg.serverEpoch || '', connectionId: msg.connectionId || '',
          principal: msg.principal || null, offsetUnit: msg.offsetUnit || '', agent: msg.agent || null, limits: msg.limits || null,
          retryAt: 0, reason: '', connectedOnce: true, refreshed,
        });
        if (refreshed) return;
        for (const p of this.pending.values()) if (!p.sent) this._sendPending(p);
        for (const sub of this.subs) this._subscribeOne(sub);
        return;
      }
      case 'unsubscribed':
        this._onUnsubscribed(msg);
        return;
      case 'ping':
        this._send({ type: 'pong' });
        return;
      case 'reconnect':
        // A draining replica: reconnect (to any replica) after its jittered delay.
        this.reconnectAfterMs = msg.afterMs || 0;
        return;
      case 'response':
        this._onResponse(msg);
        return;
      case 'event':
        this._onEvent(msg);
        return;
      case 'error':
        // Connection-level error (e.g. a rejected hello); the close follows.
        this.lastError = msg.error || null;
        this.dispatchEvent(new CustomEvent('server-error', { detail: msg.error || {} }));
        return;
      default:
        this.dispatchEvent(new CustomEvent('frame', { detail: msg }));
    }
  }

  _onResponse(msg) {
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    clearTimeout(p.timer);
    if (msg.ok) p.resolve(msg.result || {});
    else p.reject(new RequestError(msg.error || {}));
  }

  _onEvent(ev) {
    const sub = this.subsByName.get(ev.sub);
    if (!sub) {
      // Events can precede the subscribe response that names the topic.
      this.orphans.push({ ev, at: Date.now() });
      if (this.orphans.length > 1000) this.orphans.shift();
      return;
    }
    if (sub.syncing) { sub.buffer.push(ev); return; }
    this._deliver(sub, ev);
  }

  _deliver(sub, ev) {
    switch (classifyEvent(sub, ev)) {
      case 'duplicate':
        return;
      case 'resync':
        this._subscribeOne(sub);
        return;
      default:
        sub.seq = ev.seq;
        if (ev.epoch != null) sub.epoch = ev.epoch;
        sub.position = positionAfterEvent(sub.position, ev);
        try {
          sub.handlers.onEvent && sub.handlers.onEvent(ev.kind, ev.payload || {}, ev);
        } catch (err) {
          console.error('event handler failed', ev.kind, err);
        }
    }
  }

  _onUnsubscribed(msg) {
    const sub = this.subsByName.get(msg.sub);
    if (!sub) return;
    this.subsByName.delete(msg.sub);
    sub.name = null;
    sub.dropped = true;
    const reason = msg.reason || 'dropped';
    sub.handlers.onError && sub.handlers.onError(new RequestError({
      code: reason === 'forbidden' ? 'forbidden' : 'unavailable', reason,
      message: reason === 'forbidden' ? 'You no longer have access to this.' : `The server stopped this subscription (${reason}).`,
    }));
  }

  async _subscribeOne(sub) {
    if (sub.closed || !this.ready) return;
    clearTimeout(sub.retryTimer);
    sub.syncing = true;
    // Responses can arrive in any order: only the newest subscribe counts.
    sub.gen = (sub.gen || 0) + 1;
    const gen = sub.gen;
    // Requests run concurrently on the server: let a pending unsubscribe of
    // the same topic land before subscribing to it again.
    if (this.unsubscribing.size) await Promise.allSettled([...this.unsubscribing]);
    if (sub.closed || !this.ready) { sub.syncing = false; return; }
    const input = withPosition({ ...sub.input }, sub.position);
    if (sub.epoch != null && sub.seq != null) input.resume = { epoch: sub.epoch, seq: sub.seq };
    const ws = this.ws;
    let res;
    try {
      res = await this.request('subscribe', input);
    } catch (err) {
      if (sub.closed || sub.gen !== gen) return;
      sub.syncing = false;
      sub.buffer = [];
      sub.handlers.onError && sub.handlers.onError(err);
      // Retry transient failures on this same connection; a reconnect
      // resubscribes anyway.
      if (err.retryable && err.reason !== 'connection_lost' && this.ws === ws) {
        sub.retryTimer = setTimeout(() => this._subscribeOne(sub), err.retryAfterMs || backoffDelay(2));
      }
      return;
    }
    if (sub.closed || this.ws !== ws || sub.gen !== gen) return;
    if (sub.name && sub.name !== res.sub && this.subsByName.get(sub.name) === sub) this.subsByName.delete(sub.name);
    sub.name = res.sub;
    this.subsByName.set(res.sub, sub);
    const recovered = res.recovered === true && (sub.seq != null || sub.position != null);
    sub.epoch = res.epoch ?? sub.epoch;
    sub.position = positionAfterResult(sub.position, res);
    // A recovery on another replica continues that replica's seq.
    if (recovered && typeof res.seq === 'number') sub.seq = res.seq;
    if (recovered && res.changes) {
      try {
        sub.handlers.onChanges && sub.handlers.onChanges(res.changes, res);
      } catch (err) {
        console.error('changes handler failed', err);
      }
    }
    if (!recovered) {
      sub.seq = typeof res.seq === 'number' ? res.seq : 0;
      try {
        sub.handlers.onSnapshot && sub.handlers.onSnapshot(res.snapshot || {}, res);
      } catch (err) {
        console.error('snapshot handler failed', err);
      }
    }
    sub.syncing = false;
    const early = this.orphans.filter((o) => o.ev.sub === res.sub).map((o) => o.ev);
    this.orphans = this.orphans.filter((o) => o.ev.sub !== res.sub && Date.now() - o.at < 10000);
    const queued = [...early, ...sub.buffer].sort((a, b) => a.seq - b.seq);
    sub.buffer = [];
    for (const ev of queued) {
      if (sub.syncing || sub.closed) break;
      this._deliver(sub, ev);
    }
  }

  _sendPending(p) {
    if (this._send(p.frame)) p.sent = true;
  }

  _send(frame) {
    if (!this.ws || this.ws.readyState !== 1) return false;
    try {
      this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
      return true;
    } catch {
      return false;
    }
  }

  _failPending(err, all) {
    for (const [id, p] of this.pending) {
      if (!all && !p.sent) continue;
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(err);
    }
  }

  _onClose(code, reason) {
    clearTimeout(this.timers.ready);
    const wasReady = this.ready;
    this.ws = null;
    this.ready = false;
    for (const sub of this.subs) { sub.syncing = false; sub.buffer = []; }
    this.subsByName.clear();
    this.orphans = [];
    this._failPending(new RequestError({
      code: 'unavailable', retryable: true, reason: 'connection_lost',
      message: 'The connection dropped before the server answered.',
    }), false);
    if (this.stopped) return;
    const err = this.lastError;
    const fatalCode = err && (err.code === 'unauthenticated' || err.code === 'forbidden');
    if (!shouldReconnect(code) || fatalCode) {
      const why = (err && err.message) || reason || `connection closed (${code})`;
      this._setState('offline', { reason: why, closeCode: code, fatal: true, errorCode: err ? err.code : '' });
      this.dispatchEvent(new CustomEvent('fatal', { detail: { code, reason: why, error: err } }));
      this._failPending(new RequestError({ code: (err && err.code) || 'unavailable', message: why }), true);
      return;
    }
    if (typeof navigator !== 'undefined' && navigator.onLine === false) {
      this._setState('offline', { reason: 'Your browser is offline.' });
      return;
    }
    if (wasReady) this.attempt = 0;
    this._scheduleReconnect(reason || (code === 1006 ? 'connection lost' : `closed (${code})`));
  }

  _scheduleReconnect(reason) {
    clearTimeout(this.timers.retry);
    let delay = backoffDelay(this.attempt);
    if (this.reconnectAfterMs != null) { delay = this.reconnectAfterMs; this.reconnectAfterMs = null; }
    this.attempt += 1;
    this._setState('reconnecting', { retryAt: Date.now() + delay, reason, attempt: this.attempt });
    this.timers.retry = setTimeout(() => this._connect(), delay);
  }

  _checkIdle() {
    if (this.ws && this.ready && Date.now() - this.lastFrameAt > IDLE_TIMEOUT_MS) {
      // No frame (not even a ping) for a long time: the link is dead.
      const ws = this.ws;
      try { ws.close(4000, 'idle'); } catch { /* ignore */ }
      this._onClose(4000, 'no traffic from server');
    }
  }
}

function pick(obj, ...keys) {
  const out = {};
  for (const k of keys) if (obj && obj[k] !== undefined) out[k] = obj[k];
  return out;
}
