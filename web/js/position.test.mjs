import test from 'node:test';
import assert from 'node:assert/strict';
import { positionAfterResult, positionAfterEvent, withPosition, applyChanges } from './position.js';

test('a subscribe answer sets, keeps or clears the position', () => {
  const had = { epoch: 'h1.a', version: 4 };
  assert.deepEqual(positionAfterResult(had, { position: { epoch: 'h1.a', version: 9 } }), { epoch: 'h1.a', version: 9 });
  assert.deepEqual(positionAfterResult(had, { recovered: true }), had);
  assert.equal(positionAfterResult(had, { recovered: false, snapshot: {} }), null);
  assert.equal(positionAfterResult(null, { position: { epoch: '', version: 1 } }), null);
  assert.equal(positionAfterResult(null, { position: { epoch: 'x', version: -1 } }), null);
});

test('events with a version move the position forward only', () => {
  const p = { epoch: 'h1.a', version: 4 };
  assert.deepEqual(positionAfterEvent(p, { kind: 'message_delta', version: 5 }), { epoch: 'h1.a', version: 5 });
  assert.equal(positionAfterEvent(p, { kind: 'turn_update' }), p);
  assert.equal(positionAfterEvent(p, { kind: 'message_delta', version: 3 }), p);
  assert.equal(positionAfterEvent(null, { version: 7 }), null);
});

test('only session subscriptions carry a position', () => {
  const pos = { epoch: 'h1.a', version: 2 };
  assert.deepEqual(withPosition({ topic: 'session', sessionId: 's' }, pos), { topic: 'session', sessionId: 's', position: pos });
  assert.deepEqual(withPosition({ topic: 'workspace' }, pos), { topic: 'workspace' });
  assert.deepEqual(withPosition({ topic: 'session' }, null), { topic: 'session' });
});

test('recovered changes apply as latest-wins updates, in order', () => {
  const seen = [];
  const apply = (_s, kind, payload) => { seen.push([kind, payload]); return true; };
  const ok = applyChanges(apply, {}, {
    session: { id: 's' }, turns: [{ id: 't' }], messages: [{ id: 'm1', version: 5 }, { id: 'm2', version: 6 }],
  });
  assert.equal(ok, true);
  assert.deepEqual(seen.map(([k]) => k), ['session_summary', 'turn_update', 'message_update', 'message_update']);
  assert.equal(applyChanges(apply, {}, null), false);
});

test('recovered changes bring the tree, presence, goal and queue forward', () => {
  const seen = [];
  const apply = (_s, kind, payload) => { seen.push([kind, payload]); return true; };
  const tree = { rootSessionId: 's', turnId: 't', interactions: [{ requestId: 'req-away', state: 'pending' }] };
  const presence = { sessionId: 's', watchers: [] };
  const goal = { objective: 'ship it' };
  const queue = { sessionId: 's', revision: 3, entries: [] };
  applyChanges(apply, {}, { session: { id: 's' }, turns: [], messages: [], interactionTree: tree, presence, goal, queue });
  assert.deepEqual(seen.map(([k]) => k), ['session_summary', 'interaction_snapshot', 'presence', 'goal_state', 'queue']);
  assert.equal(seen[1][1], tree);
  assert.equal(seen[4][1], queue);
});
