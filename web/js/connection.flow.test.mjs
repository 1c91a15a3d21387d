// Drives Connection against a scripted fake WebSocket: handshake, ping,
// request/response, resume after a reconnect, snapshot replacement, gaps.
import test from 'node:test';
import assert from 'node:assert/strict';
import { Connection } from './connection.js';

class FakeWS {
  static all = [];
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.readyState = 0;
    this.sent = [];
    FakeWS.all.push(this);
    queueMicrotask(() => { this.readyState = 1; this.onopen && this.onopen(); });
  }
  send(s) { this.sent.push(JSON.parse(s)); }
  close(code = 1000, reason = '') {
    if (this.readyState === 3) return;
    this.readyState = 3;
    queueMicrotask(() => this.onclose && this.onclose({ code, reason }));
  }
  // server side helpers
  push(obj) { this.onmessage && this.onmessage({ data: JSON.stringify(obj) }); }
  lastRequest(op) { return [...this.sent].reverse().find((f) => f.type === 'request' && f.op === op); }
}

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

test('handshake, ping, subscribe, resume and resync', async () => {
  FakeWS.all = [];
  const conn = new Connection({ url: 'ws://x/v1/ws', token: 'tok', WebSocketImpl: FakeWS, timeoutMs: 2000 });
  const seen = [];
  const snaps = [];
  conn.start();
  await tick();
  const ws = FakeWS.all[0];
  assert.deepEqual(ws.protocols, ['ensemble.v2', 'ensemble.v1']);
  assert.deepEqual(ws.sent[0], { type: 'hello', token: 'tok' });

  conn.subscribe({ workspace: 'w1', topic: 'workspace' }, {
    onSnapshot: (s) => snaps.push(s),
    onEvent: (kind, payload, ev) => seen.push(ev.seq),
  });
  ws.push({ type: 'ready', protocol: 1, serverEpoch: 'ep1', connectionId: 'c1', principal: { userId: 'u' }, offsetUnit: 'utf16' });
  assert.equal(conn.state, 'connected');
  ws.push({ type: 'ping' });
  assert.deepEqual(ws.sent.at(-1).type === 'pong' || ws.sent.some((f) => f.type === 'pong'), true);

  await tick();
  let req = ws.lastRequest('subscribe');
  assert.deepEqual(req.input, { workspace: 'w1', topic: 'workspace' });
  ws.push({ type: 'response', id: req.id, ok: true, result: { sub: 'workspace:w1', epoch: 'e1', seq: 4, recovered: false, snapshot: { sessions: [] } } });
  await tick();
  assert.equal(snaps.length, 1);
  for (const seq of [5, 5, 6]) ws.push({ type: 'event', sub: 'workspace:w1', epoch: 'e1', seq, kind: 'session_summary', payload: {} });
  assert.deepEqual(seen, [5, 6]); // duplicate dropped

  // drop the connection: reconnect and resume from (e1, 6)
  ws.close(1006);
  await tick(10);
  assert.equal(conn.state, 'reconnecting');
  conn.reconnectNow();
  await tick();
  const ws2 = FakeWS.all[1];
  assert.ok(ws2, 'reconnected');
  ws2.push({ type: 'ready', protocol: 1, serverEpoch: 'ep1', connectionId: 'c2', principal: {} });
  await tick();
  req = ws2.lastRequest('subscribe');
  assert.deepEqual(req.input.resume, { epoch: 'e1', seq: 6 });
  ws2.push({ type: 'response', id: req.id, ok: true, result: { sub: 'workspace:w1', epoch: 'e1', seq: 6, recovered: true } });
  await tick();
  ws2.push({ type: 'event', sub: 'workspace:w1', epoch: 'e1', seq: 7, kind: 'session_summary', payload: {} });
  assert.deepEqual(seen, [5, 6, 7]);
  assert.equal(snaps.length, 1, 'recovered: no snapshot');

  // a gap triggers a resubscribe with resume; the fresh snapshot replaces state
  ws2.push({ type: 'event', sub: 'workspace:w1', epoch: 'e1', seq: 9, kind: 'session_summary', payload: {} });
  await tick();
  req = ws2.lastRequest('subscribe');
  assert.deepEqual(req.input.resume, { epoch: 'e1', seq: 7 });
  ws2.push({ type: 'response', id: req.id, ok: true, result: { sub: 'workspace:w1', epoch: 'e2', seq: 20, recovered: false, snapshot: { sessions: [1] } } });
  await tick();
  assert.equal(snaps.length, 2);
  ws2.push({ type: 'event', sub: 'workspace:w1', epoch: 'e2', seq: 21, kind: 'session_summary', payload: {} });
  assert.deepEqual(seen, [5, 6, 7, 21]);
  conn.stop();
});

test('requests: errors, lost connection, fatal close', async () => {
  FakeWS.all = [];
  const conn = new Connection({ url: 'ws://x/v1/ws', token: 'bad', WebSocketImpl: FakeWS, timeoutMs: 2000 });
  conn.start();
  await tick();
  const ws = FakeWS.all[0];
  ws.push({ type: 'ready', protocol: 1, serverEpoch: 'ep1', connectionId: 'c1', principal: {} });
  const p1 = conn.request('session.get', { workspace: 'w', sessionId: 's' });
  const r1 = ws.lastRequest('session.get');
  ws.push({ type: 'response', id: r1.id, ok: false, error: { code: 'not_found', message: 'nope', retryable: false } });
  await assert.rejects(p1, (e) => e.code === 'not_found' && e.message === 'nope');

  const p2 = conn.request('turn.message.submit', {});
  ws.close(1006);
  await assert.rejects(p2, (e) => e.code === 'unavailable' && e.reason === 'connection_lost');

  conn.reconnectNow();
  await tick();
  const ws2 = FakeWS.all[1];
  let fatal = null;
  conn.addEventListener('fatal', (e) => { fatal = e.detail; });
  ws2.push({ type: 'error', error: { code: 'unauthenticated', message: 'invalid token' } });
  ws2.close(4501);
  await tick(10);
  assert.equal(conn.state, 'offline');
  assert.equal(fatal.error.code, 'unauthenticated');
  assert.equal(FakeWS.all.length, 2, 'no reconnect after 4501');
  conn.stop();
});

test('a session subscription resumes from its durable position on another replica', async () => {
  FakeWS.all = [];
  const conn = new Connection({ url: 'ws://x/v1/ws', token: 'tok', WebSocketImpl: FakeWS, timeoutMs: 2000 });
  const seen = [];
  const changes = [];
  conn.start();
  await tick();
  const ws = FakeWS.all[0];
  conn.subscribe({ workspace: 'w1', topic: 'session', sessionId: 's1' }, {
    onSnapshot: () => {},
    onEvent: (kind, payload, ev) => seen.push(`${ev.epoch}/${ev.seq}`),
    onChanges: (c) => changes.push(c),
  });
  ws.push({ type: 'ready', protocol: 1, serverEpoch: 'A', connectionId: 'c1', principal: {} });
  await tick();
  let req = ws.lastRequest('subscribe');
  assert.equal(req.input.position, undefined);
  ws.push({ type: 'response', id: req.id, ok: true, result: { sub: 'session:w1/s1', epoch: 'hubA.1', seq: 2, recovered: false, position: { epoch: 'h1.s', version: 10 }, snapshot: {} } });
  await tick();
  ws.push({ type: 'event', sub: 'session:w1/s1', epoch: 'hubA.1', seq: 3, kind: 'message_delta', version: 11, payload: {} });
  ws.push({ type: 'event', sub: 'session:w1/s1', epoch: 'hubA.1', seq: 4, kind: 'turn_update', payload: {} });

  ws.close(1006); // the load balancer sends the reconnect to replica B
  await tick(10);
  conn.reconnectNow();
  await tick();
  const ws2 = FakeWS.all[1];
  ws2.push({ type: 'ready', protocol: 1, serverEpoch: 'B', connectionId: 'c2', principal: {} });
  await tick();
  req = ws2.lastRequest('subscribe');
  assert.deepEqual(req.input.position, { epoch: 'h1.s', version: 11 });
  assert.deepEqual(req.input.resume, { epoch: 'hubA.1', seq: 4 });
  // B recovers from the position: its own stream epoch and seq continue.
  ws2.push({ type: 'response', id: req.id, ok: true, result: { sub: 'session:w1/s1', epoch: 'hubB.7', seq: 40, recovered: true, position: { epoch: 'h1.s', version: 11 }, changes: { session: { id: 's1' }, turns: [], messages: [] } } });
  await tick();
  ws2.push({ type: 'event', sub: 'session:w1/s1', epoch: 'hubB.7', seq: 41, kind: 'message_delta', version: 12, payload: {} });
  assert.deepEqual(seen, ['hubA.1/3', 'hubA.1/4', 'hubB.7/41']);
  assert.equal(changes.length, 1);
  conn.stop && conn.stop();
});

test('protocol 2: a multi-event frame, a deferred subscribe and a drain', async () => {
  FakeWS.all = [];
  const conn = new Connection({ url: 'ws://x/v1/ws', token: 'tok', WebSocketImpl: FakeWS, timeoutMs: 2000 });
  const seen = [];
  conn.start();
  await tick();
  const ws = FakeWS.all[0];
  conn.subscribe({ workspace: 'w1', topic: 'workspace' }, { onSnapshot: () => {}, onEvent: (k, p, ev) => seen.push(ev.seq), onError: () => {} });
  ws.push({ type: 'ready', protocol: 2, serverEpoch: 'ep1', connectionId: 'c1', principal: {} });
  await tick();
  // admission control: the first subscribe is deferred with a hint
  let req = ws.lastRequest('subscribe');
  ws.push({ type: 'response', id: req.id, ok: false, error: { code: 'unavailable', message: 'busy', retryable: true, reason: 'busy', retryAfterMs: 30 } });
  await tick(5);
  assert.equal(ws.lastRequest('subscribe').id, req.id, 'no retry before the hint');
  await tick(40);
  req = ws.lastRequest('subscribe');
  ws.push({ type: 'response', id: req.id, ok: true, result: { sub: 'workspace:w1', epoch: 'e1', seq: 1, recovered: false, snapshot: { sessions: [] } } });
  await tick();
  // several events in one frame, applied in order
  ws.onmessage({ data: JSON.stringify([2, 3, 4].map((seq) => ({ type: 'event', sub: 'workspace:w1', epoch: 'e1', seq, kind: 'session_summary', payload: {} }))) });
  assert.deepEqual(seen, [2, 3, 4]);
  // a draining replica: reconnect after the delay it gave, not the backoff
  ws.push({ type: 'reconnect', reason: 'draining', afterMs: 25 });
  ws.close(4001, 'server draining; reconnect in 25 ms');
  await tick(5);
  assert.equal(FakeWS.all.length, 1);
  await tick(40);
  assert.equal(FakeWS.all.length, 2, 'reconnected after the hinted delay');
  conn.stop();
});
